from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (h), with the bonus: refcounts in a numpy array and the lowest free block found by
# flatnonzero; every sequence stepped on its own through write/read; Part 5 keyed by a HASH CHAIN
# (each block's hash folds in its parent's), where a hit compares the whole prefix, so a collision is
# a miss; recency is a clock stamped on each block at every use, eviction takes the smallest stamp.
# Part 6 takes CPU blocks from a stack, copies layer by layer, empties a group with its own free(),
# and hands out handle objects that know their space and whether they were used.
import numbers

import numpy as np

from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _int(x, what):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{what}: not an integer ({type(x).__name__})")
    return int(x)


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        n_blocks, block_size = _int(n_blocks, "n_blocks"), _int(block_size, "block_size")
        if n_blocks < 1 or block_size < 1:
            raise ValueError("n_blocks and block_size must be >= 1")
        self.cfg, self.n_blocks, self.block_size = cfg, n_blocks, block_size
        self.k = np.zeros((cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head))
        self.v = np.zeros((cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head))
        self.rc = np.zeros(n_blocks, dtype=np.int64)
        self.n_copies = 0
        self.peak_used = 0

    @property
    def n_used(self):
        return int(np.count_nonzero(self.rc))

    @property
    def n_free(self):
        return self.n_blocks - self.n_used

    def _id(self, b):
        b = _int(b, "block id")
        if b < 0 or b >= self.n_blocks:
            raise ValueError(f"block {b} out of range")
        return b

    def _held(self, b):
        b = self._id(b)
        if self.rc[b] == 0:
            raise ValueError(f"block {b} is not in use")
        return b

    def alloc(self):
        free = np.flatnonzero(self.rc == 0)
        if free.size == 0:
            raise MemoryError("no free block")
        b = int(free[0])
        self.rc[b] = 1
        self.peak_used = max(self.peak_used, self.n_used)
        return b

    def incref(self, b):
        self.rc[self._held(b)] += 1

    def decref(self, b):
        self.rc[self._held(b)] -= 1

    def refcount(self, b):
        return int(self.rc[self._id(b)])

    def copy_block(self, b):
        b = self._held(b)
        new = self.alloc()
        self.k[:, new], self.v[:, new] = self.k[:, b], self.v[:, b]
        self.n_copies += 1
        return new


class PagedSequence:
    def __init__(self, pool):
        self.pool, self.blocks, self.length = pool, [], 0

    def _cow_due(self):
        return bool(self.length % self.pool.block_size) and self.pool.refcount(self.blocks[-1]) > 1

    def _missing(self, n):
        B = self.pool.block_size
        return max(0, -(-(self.length + n) // B) - len(self.blocks))

    def reserve(self, n):
        n = _int(n, "n")
        if n < 1:
            raise ValueError("reserve(n) needs n >= 1")
        if self._cow_due() + self._missing(n) > self.pool.n_free:
            raise MemoryError("not enough free blocks")
        if self._cow_due():
            old = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(old)
            self.pool.decref(old)
        while self._missing(n):
            self.blocks.append(self.pool.alloc())

    def _where(self, start, stop):
        pos = np.arange(start, stop)
        return np.array(self.blocks, dtype=np.int64)[pos // self.pool.block_size], pos % self.pool.block_size

    def write(self, layer, start, k, v):
        b, s = self._where(start, start + len(k))
        self.pool.k[layer, b, s], self.pool.v[layer, b, s] = k, v

    def read(self, layer, length):
        b, s = self._where(0, length)
        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]

    def fork(self):
        twin = PagedSequence(self.pool)
        twin.blocks = self.blocks[:]
        twin.length = self.length
        for b in twin.blocks:
            self.pool.incref(b)
        return twin

    def free(self):
        while self.blocks:                                 # last block first; order does not matter
            self.pool.decref(self.blocks.pop())
        self.length = 0


def _chunk(cfg, seq, chunk):
    tokens = [_int(t, "token id") for t in np.asarray(chunk, dtype=object).reshape(-1)] \
        if np.ndim(chunk) == 1 else None
    if not tokens:
        raise ValueError("a chunk is a non-empty 1-D list of token ids")
    if min(tokens) < 0 or max(tokens) >= cfg.vocab:
        raise ValueError("token id out of range")
    if seq.length + len(tokens) > cfg.max_len:
        raise ValueError("past max_len")
    return np.array(tokens, dtype=np.int64)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("one chunk per sequence")
    chunks = [_chunk(cfg, s, c) for s, c in zip(seqs, chunks)]
    demand, writers = {}, {}
    for s, c in zip(seqs, chunks):
        demand[id(s.pool)] = demand.get(id(s.pool), 0) + s._missing(len(c))
        if s.length % s.pool.block_size:
            writers.setdefault((id(s.pool), s.blocks[-1]), [s.pool, 0])[1] += 1
    for (pid, b), (pool, w) in writers.items():
        demand[pid] += min(w, pool.refcount(b) - 1)
    for s in seqs:
        if demand.get(id(s.pool), 0) > s.pool.n_free:
            raise MemoryError("the step does not fit")
    return [_advance(params, cfg, s, c) for s, c in zip(seqs, chunks)]


def _advance(params, cfg, seq, chunk):
    """One sequence's share of the step: room first, then every layer writes and attends."""
    seq.reserve(len(chunk))
    t0, t1 = seq.length, seq.length + len(chunk)
    h = embed(params, cfg, chunk, t0)
    for layer in range(cfg.n_layers):
        q, k, v = qkv(params, cfg, layer, h)
        seq.write(layer, t0, k, v)
        h = attn_out(params, cfg, layer, h, attention_core(q, *seq.read(layer, t1), t0))
    seq.length = t1
    return unembed(params, cfg, h)


def blockwise_attention(q, seq, layer):
    L, B, pool = seq.length, seq.pool.block_size, seq.pool
    if L < 1:
        raise ValueError("empty sequence")
    parts = []
    for i in range(-(-L // B)):
        m = min(B, L - i * B)
        K, V = pool.k[layer, seq.blocks[i], :m], pool.v[layer, seq.blocks[i], :m]
        parts.append((np.einsum("hd,mhd->hm", q, K) / np.sqrt(q.shape[-1]), V))
    top = np.max(np.stack([s.max(axis=1) for s, _ in parts]), axis=0)
    num = sum(np.einsum("hm,mhd->hd", np.exp(s - top[:, None]), V) for s, V in parts)
    den = sum(np.exp(s - top[:, None]).sum(axis=1) for s, _ in parts)
    return num / den[:, None]


class PrefixCache:
    def __init__(self, pool):
        self.pool = pool
        self.n_hit_tokens = 0
        self._buckets = {}     # chain hash -> [[prefix tuple, block], ...]
        self._entry = {}       # block -> (chain hash, prefix tuple)
        self._stamp = {}       # block -> clock at its last use
        self._clock = 0

    @property
    def n_cached(self):
        return len(self._entry)

    def _chain(self, tokens):
        """(hash, whole prefix) of each full block; block i's hash folds in block i - 1's."""
        t = [_int(x, "token id") for x in np.asarray(tokens, dtype=object).reshape(-1)]
        B, h, out = self.pool.block_size, 0, []
        for i in range(len(t) // B):
            h = hash((h, tuple(t[i * B:(i + 1) * B])))
            out.append((h, tuple(t[:(i + 1) * B])))
        return out

    def _block_of(self, h, prefix):
        for p, b in self._buckets.get(h, ()):
            if p == prefix:          # a collision is a miss
                return b
        return None

    def lookup(self, tokens):
        cap = max(0, (len(tokens) - 1) // self.pool.block_size)
        hits = []
        for h, prefix in self._chain(tokens)[:cap]:
            b = self._block_of(h, prefix)
            if b is None:
                break
            hits.append(b)
        return hits

    def insert(self, tokens, blocks):
        chain = self._chain(tokens)
        if len(blocks) < len(chain):
            raise ValueError("the table is shorter than the full blocks")
        new = []
        for (h, prefix), b in zip(chain, blocks):
            if self._block_of(h, prefix) is None:
                b = self.pool._id(b)
                if b in self._entry:
                    continue
                if self.pool.refcount(b) == 0:
                    raise ValueError(f"block {b} is free")
                new.append((h, prefix, b))
        for h, prefix, b in new:
            self.pool.incref(b)
            self._buckets.setdefault(h, []).append([prefix, b])
            self._entry[b] = (h, prefix)
        for h, prefix in reversed(chain):
            b = self._block_of(h, prefix)
            if b is not None:
                self._clock += 1
                self._stamp[b] = self._clock
        return len(new)

    def _evictable(self, keep=()):
        return sorted((b for b in self._entry if self.pool.refcount(b) == 1 and b not in keep),
                      key=self._stamp.__getitem__)

    def evict(self, n):
        n = _int(n, "n")
        if n < 0:
            raise ValueError("evict(n) needs n >= 0")
        victims = self._evictable()[:n]
        for b in victims:
            h, prefix = self._entry.pop(b)
            self._buckets[h] = [e for e in self._buckets[h] if e[1] != b]
            del self._stamp[b]
            self.pool.decref(b)
        return len(victims)


def cached_prefill(params, cfg, seq, prompt, cache):
    if seq.length or seq.blocks:
        raise ValueError("the sequence is not empty")
    if seq.pool is not cache.pool:
        raise ValueError("the sequence is on another pool")
    prompt = _chunk(cfg, seq, prompt)
    pool = cache.pool
    hits = cache.lookup(prompt)
    need = -(-len(prompt) // pool.block_size) - len(hits)
    short = need - pool.n_free
    if short > len(cache._evictable(keep=hits)):
        raise MemoryError("not enough blocks, even evicting")
    n_hit = len(hits) * pool.block_size
    seq.blocks = []
    for b in hits:                     # the sequence's own reference first, so eviction cannot take them
        pool.incref(b)
        seq.blocks.append(b)
    seq.length = n_hit
    if short > 0:
        cache.evict(short)
    logits = paged_step(params, cfg, [seq], [prompt[n_hit:]])[0]
    cache.n_hit_tokens += n_hit
    cache.insert(prompt, seq.blocks)
    return logits


# ---------------------------------------------------------------- Part 6: the swap space
class _Swapped:
    """What swap_out hands back: the group's lengths and CPU tables, until swap_in uses it up."""

    def __init__(self, space, lengths, tables):
        self.space, self.lengths, self.tables, self.live = space, lengths, tables, True


class SwapSpace:
    """CPU blocks from a free stack (the lowest on top), copied block by block; a group's sequences are
    emptied with their own free(); a handle knows its space and whether it was used."""

    def __init__(self, pool, n_blocks):
        self.pool, self.n_blocks = pool, _int(n_blocks, "n_blocks")
        cfg, B = pool.cfg, pool.block_size
        self.k = np.zeros((cfg.n_layers, self.n_blocks, B, cfg.n_heads, cfg.d_head))
        self.v = np.zeros_like(self.k)
        self._stack = list(range(self.n_blocks - 1, -1, -1))
        self.n_out = 0
        self.n_in = 0

    @property
    def n_free(self):
        return len(self._stack)

    def swap_out(self, seqs):
        seqs = list(seqs)
        ids = [id(s) for s in seqs]
        if not seqs or len(ids) != len(set(ids)):
            raise ValueError("swap_out needs a non-empty group of distinct sequences")
        for s in seqs:
            if s.pool is not self.pool:
                raise ValueError("a sequence of another pool")
        first = {}
        for s in seqs:
            for b in s.blocks:
                first.setdefault(int(b), None)
        if len(first) > len(self._stack):
            raise MemoryError(f"{len(first)} blocks, {len(self._stack)} CPU blocks free")
        for b in first:
            c = first[b] = self._stack.pop()
            for layer in range(self.pool.cfg.n_layers):
                self.k[layer, c] = self.pool.k[layer, b]
                self.v[layer, c] = self.pool.v[layer, b]
        handle = _Swapped(self, [s.length for s in seqs], [[first[int(b)] for b in s.blocks] for s in seqs])
        for s in seqs:
            s.free()
        self.n_out += len(first)
        return handle

    def swap_in(self, handle):
        if not isinstance(handle, _Swapped) or handle.space is not self or not handle.live:
            raise ValueError("not a live handle of this swap space")
        order = []
        for table in handle.tables:
            for c in table:
                if c not in order:
                    order.append(c)
        if len(order) > self.pool.n_free:
            raise MemoryError(f"{len(order)} blocks needed, {self.pool.n_free} free")
        back = {}
        for c in order:
            b = back[c] = self.pool.alloc()
            for layer in range(self.pool.cfg.n_layers):
                self.pool.k[layer, b] = self.k[layer, c]
                self.pool.v[layer, b] = self.v[layer, c]
        entries = {}
        for table in handle.tables:
            for c in table:
                entries[c] = entries.get(c, 0) + 1
        for c, n in entries.items():
            for _ in range(n - 1):
                self.pool.incref(back[c])
        seqs = []
        for length, table in zip(handle.lengths, handle.tables):
            seq = PagedSequence(self.pool)
            seq.blocks = [back[c] for c in table]
            seq.length = length
            seqs.append(seq)
        self._stack.extend(sorted(order, reverse=True))
        self._stack.sort(reverse=True)
        handle.live = False
        self.n_in += len(order)
        return seqs
