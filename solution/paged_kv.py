"""PagedAttention for the TINY transformer: reference solution (course staff only).

Part 1 BlockPool: a refcounted pool of fixed-size KV blocks, lowest free block first.
Part 2 PagedSequence + paged_step: K/V written and read through a block table.
Part 3 blockwise_attention: the vLLM paper's eq. 4, one block at a time.
Part 4 fork + lazy copy-on-write in reserve.
Part 5 (bonus) PrefixCache + cached_prefill: full blocks cached by their whole prefix, LRU eviction.
Part 6 (bonus) SwapSpace: a preempted group's blocks copied to CPU blocks and back, sharing kept.
"""
import heapq
import math
import numbers
from collections import OrderedDict

import numpy as np

from decoding import beam_search, parallel_sample  # noqa: F401  (re-exported for the lecture script)
from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _as_int(x, what):
    if type(x) is int:          # the common case, without the ABC's isinstance (every refcount read)
        return x
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{what} must be an integer, got {type(x).__name__}")
    return int(x)


# ---------------------------------------------------------------- Part 1: the block allocator
class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        n_blocks = _as_int(n_blocks, "n_blocks")
        block_size = _as_int(block_size, "block_size")
        if n_blocks < 1 or block_size < 1:
            raise ValueError(f"need n_blocks >= 1 and block_size >= 1, got {n_blocks}, {block_size}")
        self.cfg, self.n_blocks, self.block_size = cfg, n_blocks, block_size
        shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)
        self.k = np.zeros(shape)
        self.v = np.zeros(shape)
        self.n_copies = 0
        self.peak_used = 0
        self._ref = [0] * n_blocks
        self._free = list(range(n_blocks))          # a min-heap: alloc pops the lowest id
        self._used = 0

    @property
    def n_used(self):
        return self._used

    @property
    def n_free(self):
        return self.n_blocks - self._used

    def _in_use(self, b):
        b = _as_int(b, "block id")
        if not 0 <= b < self.n_blocks:
            raise ValueError(f"block id {b} is outside [0, {self.n_blocks})")
        if self._ref[b] == 0:
            raise ValueError(f"block {b} is free")
        return b

    def alloc(self):
        if not self._free:
            raise MemoryError(f"all {self.n_blocks} blocks are in use")
        b = heapq.heappop(self._free)
        self._ref[b] = 1
        self._used += 1
        self.peak_used = max(self.peak_used, self._used)
        return b

    def incref(self, b):
        self._ref[self._in_use(b)] += 1

    def decref(self, b):
        b = self._in_use(b)
        self._ref[b] -= 1
        if self._ref[b] == 0:
            self._used -= 1
            heapq.heappush(self._free, b)

    def refcount(self, b):
        b = _as_int(b, "block id")
        if not 0 <= b < self.n_blocks:
            raise ValueError(f"block id {b} is outside [0, {self.n_blocks})")
        return self._ref[b]

    def copy_block(self, b):
        b = self._in_use(b)
        new = self.alloc()
        self.k[:, new] = self.k[:, b]
        self.v[:, new] = self.v[:, b]
        self.n_copies += 1
        return new


# ---------------------------------------------------------------- Part 2: paged KV and the step
def _slots(table, block_size, start, stop):
    """Where positions start..stop-1 live: (physical blocks, slots) through a block table, or through
    the equally long tables of several sequences at once ([G, n] -> blocks [G, stop-start])."""
    pos = np.arange(start, stop)
    return np.asarray(table, dtype=np.int64)[..., pos // block_size], pos % block_size


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def _needs_copy(self):
        """Copy-on-write is due: the last block is partly filled and someone else holds it too."""
        return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1

    def _new_blocks(self, n):
        return max(0, math.ceil((self.length + n) / self.pool.block_size) - len(self.blocks))

    def reserve(self, n):
        n = _as_int(n, "n")
        if n < 1:
            raise ValueError(f"reserve needs n >= 1, got {n}")
        need = int(self._needs_copy()) + self._new_blocks(n)
        if need > self.pool.n_free:
            raise MemoryError(f"need {need} blocks, {self.pool.n_free} free")
        if self._needs_copy():
            shared = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(shared)
            self.pool.decref(shared)
        for _ in range(self._new_blocks(n)):
            self.blocks.append(self.pool.alloc())

    def write(self, layer, start, k, v):
        b, s = _slots(self.blocks, self.pool.block_size, start, start + len(k))
        self.pool.k[layer, b, s] = k
        self.pool.v[layer, b, s] = v

    def read(self, layer, length):
        b, s = _slots(self.blocks, self.pool.block_size, 0, length)
        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]

    def fork(self):
        child = PagedSequence(self.pool)
        for b in self.blocks:
            self.pool.incref(b)
        child.blocks, child.length = list(self.blocks), self.length
        return child

    def free(self):
        for b in self.blocks:
            self.pool.decref(b)
        self.blocks, self.length = [], 0


def _check_chunk(cfg, seq, chunk):
    arr = np.asarray(chunk)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"a chunk must be a non-empty 1-D list of token ids, got shape {arr.shape}")
    if arr.dtype == object:     # Python ints too large for int64: clamp to [-1, vocab], still rejected below
        arr = np.array([min(max(_as_int(t, "token id"), -1), cfg.vocab) for t in arr], dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
    if arr.min() < 0 or arr.max() >= cfg.vocab:
        raise ValueError(f"token ids must lie in [0, {cfg.vocab})")
    if seq.length + arr.size > cfg.max_len:
        raise ValueError(f"{seq.length} + {arr.size} tokens would pass max_len={cfg.max_len}")
    return arr.astype(np.int64)


def _blocks_needed(seqs, chunks):
    """Exact block demand of a step per pool: new blocks plus copy-on-write copies, where n holders
    of a shared partial block in this step make min(n, refcount - 1) copies (the last writes in place)."""
    need, sharers = {}, {}
    for seq, chunk in zip(seqs, chunks):
        pool = seq.pool
        need[id(pool)] = need.get(id(pool), 0) + seq._new_blocks(len(chunk))
        if seq.length % pool.block_size:
            key = (id(pool), seq.blocks[-1])
            sharers[key] = sharers.get(key, 0) + 1
    pools = {id(s.pool): s.pool for s in seqs}
    for (pid, b), n in sharers.items():
        need[pid] += min(n, pools[pid].refcount(b) - 1)
    return [(pools[pid], n) for pid, n in need.items()]


def paged_step(params, cfg, seqs, chunks):
    """Advance every sequence by its chunk; returns one [len(chunk), vocab] logits array each."""
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError(f"{len(seqs)} sequences but {len(chunks)} chunks")
    chunks = [_check_chunk(cfg, s, c) for s, c in zip(seqs, chunks)]
    for pool, n in _blocks_needed(seqs, chunks):
        if n > pool.n_free:
            raise MemoryError(f"this step needs {n} blocks, the pool has {pool.n_free} free")
    for seq, chunk in zip(seqs, chunks):
        seq.reserve(len(chunk))
    groups = {}          # sequences of one pool at the same position with equal chunks run as one batch
    for i, (seq, chunk) in enumerate(zip(seqs, chunks)):
        groups.setdefault((id(seq.pool), seq.length, len(chunk)), []).append(i)
    out = [None] * len(seqs)
    for (_, start, T), idx in groups.items():
        pool = seqs[idx[0]].pool
        blocks, slots = _slots([seqs[i].blocks for i in idx], pool.block_size, 0, start + T)  # tables: one length
        x = embed(params, cfg, np.stack([chunks[i] for i in idx]), start)          # [G, T, d_model]
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            pool.k[layer, blocks[:, start:], slots[start:]] = k                     # write through the tables
            pool.v[layer, blocks[:, start:], slots[start:]] = v
            K, V = pool.k[layer, blocks, slots], pool.v[layer, blocks, slots]       # read them back, gathered
            x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start))
        logits = unembed(params, cfg, x)
        for g, i in enumerate(idx):
            seqs[i].length = start + T
            out[i] = logits[g]
    return out


# ---------------------------------------------------------------- Part 3: blockwise attention
def blockwise_attention(q, seq, layer):
    """q [H, Dh] attends to every position of `seq`, one block at a time (paper eq. 4)."""
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("blockwise_attention needs a sequence of length >= 1")
    scores, values = [], []
    for i in range(-(-L // B)):
        b, m = seq.blocks[i], min(B, L - i * B)
        scores.append(np.einsum("hd,mhd->hm", q, seq.pool.k[layer, b, :m]) / np.sqrt(q.shape[-1]))
        values.append(seq.pool.v[layer, b, :m])
    top = np.max([s.max(axis=-1) for s in scores], axis=0)[:, None]     # one softmax over all blocks
    weights = [np.exp(s - top) for s in scores]
    total = np.sum([w.sum(axis=-1) for w in weights], axis=0)[:, None]
    return np.sum([np.einsum("hm,mhd->hd", w / total, v) for w, v in zip(weights, values)], axis=0)


# ---------------------------------------------------------------- Part 5 (bonus): shared prefix across requests
class PrefixCache:
    """Full blocks cached by the whole prefix they end (so equal content after a different prefix
    never matches), one pool reference each, least recently used first in `_lru`."""

    def __init__(self, pool):
        self.pool = pool
        self.n_hit_tokens = 0
        self._block = {}             # key (the tuple of tokens up to the block's end) -> physical block
        self._lru = OrderedDict()    # physical block -> its key, least recently used first

    @property
    def n_cached(self):
        return len(self._lru)

    def _keys(self, tokens):
        """The keys of the full blocks of `tokens`, block 0 first. The tokens are checked as the
        first chunk of a new sequence would be, except that none at all is fine."""
        if np.asarray(tokens).size == 0:
            return []
        t = tuple(_check_chunk(self.pool.cfg, PagedSequence(self.pool), tokens).tolist())
        return [t[:(i + 1) * self.pool.block_size] for i in range(len(t) // self.pool.block_size)]

    def lookup(self, tokens):
        """The cached chain of `tokens`, stopping at the first miss; at least one token is left over."""
        hits = []
        for key in self._keys(tokens)[:(len(tokens) - 1) // self.pool.block_size]:
            if key not in self._block:
                break
            hits.append(self._block[key])
        return hits

    def insert(self, tokens, blocks):
        """Cache blocks[i] under the key of full block i where neither is cached yet; returns how many."""
        keys = self._keys(tokens)
        if len(blocks) < len(keys):
            raise ValueError(f"{len(keys)} full blocks of tokens but a table of {len(blocks)}")
        ids = [_as_int(b, "block id") for b in blocks[:len(keys)]]
        if len(set(ids)) < len(ids):
            raise ValueError(f"a block id appears twice in {ids}")
        new = [(key, b) for key, b in zip(keys, ids) if key not in self._block and b not in self._lru]
        for _, b in new:
            if self.pool.refcount(b) == 0:
                raise ValueError(f"block {b} is free: nothing to cache")
        for key, b in new:
            self.pool.incref(b)
            self._block[key], self._lru[b] = b, key
        for key in reversed(keys):   # one use: block 0 last, so the tail of a chain is evicted first
            if key in self._block:
                self._lru.move_to_end(self._block[key])
        return len(new)

    def _evictable(self, keep=()):
        return [b for b in self._lru if self.pool.refcount(b) == 1 and b not in keep]

    def evict(self, n):
        """Release up to n blocks only the cache holds, least recently used first; no cascade."""
        n = _as_int(n, "the number of blocks to evict")
        if n < 0:
            raise ValueError(f"cannot evict {n} blocks")
        victims = self._evictable()[:n]
        for b in victims:
            del self._block[self._lru.pop(b)]
            self.pool.decref(b)
        return len(victims)


def cached_prefill(params, cfg, seq, prompt, cache):
    """Prefill an empty `seq` with `prompt`, reusing the longest cached prefix; logits of the rest."""
    if seq.length != 0 or len(seq.blocks) != 0:
        raise ValueError("cached_prefill needs an empty sequence")
    if seq.pool is not cache.pool:
        raise ValueError("the sequence and the cache use different pools")
    prompt = _check_chunk(cfg, seq, prompt)
    pool, hits = cache.pool, cache.lookup(prompt)
    short = math.ceil(len(prompt) / pool.block_size) - len(hits) - pool.n_free
    if short > len(cache._evictable(keep=hits)):
        raise MemoryError(f"the prompt needs {short} blocks more than are free or evictable")
    for b in hits:
        pool.incref(b)
    seq.blocks, seq.length = list(hits), len(hits) * pool.block_size
    cache.evict(max(0, short))
    (logits,) = paged_step(params, cfg, [seq], [prompt[seq.length:]])
    cache.n_hit_tokens += len(hits) * pool.block_size
    cache.insert(prompt, seq.blocks)
    return logits


# ---------------------------------------------------------------- Part 6 (bonus): preemption by swapping
class SwapSpace:
    """CPU blocks a preempted group's K/V waits in: swap_out copies each distinct block of the group
    once and gives the group's references back; swap_in takes one pool block per CPU block again, in
    order of first appearance, so the blocks the group shared come back shared."""

    def __init__(self, pool, n_blocks):
        n_blocks = _as_int(n_blocks, "n_blocks")
        if n_blocks < 1:
            raise ValueError(f"need n_blocks >= 1, got {n_blocks}")
        self.pool, self.n_blocks = pool, n_blocks
        cfg = pool.cfg
        shape = (cfg.n_layers, n_blocks, pool.block_size, cfg.n_heads, cfg.d_head)
        self.k = np.zeros(shape)
        self.v = np.zeros(shape)
        self.n_out = self.n_in = 0
        self._cpu_free = list(range(n_blocks))      # CPU blocks holding nothing, lowest first
        self._out = {}                              # handle -> (lengths, tables of CPU block ids)

    @property
    def n_free(self):
        return len(self._cpu_free)

    def swap_out(self, seqs):
        """Copy the group's distinct blocks to CPU blocks, give back every table entry, empty the group."""
        seqs = list(seqs)
        if not seqs or len({id(s) for s in seqs}) < len(seqs):
            raise ValueError("swap_out needs a non-empty list of distinct sequences")
        if any(s.pool is not self.pool for s in seqs):
            raise ValueError("every sequence must be of this swap space's pool")
        distinct = list(dict.fromkeys(b for s in seqs for b in s.blocks))
        if len(distinct) > self.n_free:
            raise MemoryError(f"the group holds {len(distinct)} blocks, {self.n_free} CPU blocks are free")
        cpu = {b: self._cpu_free.pop(0) for b in distinct}
        for b, c in cpu.items():
            self.k[:, c], self.v[:, c] = self.pool.k[:, b], self.pool.v[:, b]
        self.n_out += len(cpu)
        handle = object()
        self._out[handle] = [(s.length, [cpu[b] for b in s.blocks]) for s in seqs]
        for s in seqs:
            for b in s.blocks:
                self.pool.decref(b)
            s.blocks, s.length = [], 0
        return handle

    def swap_in(self, handle):
        """New sequences of the pool holding the group again, in swap_out's order; the handle is used up."""
        try:
            group = self._out.get(handle)
        except TypeError:           # an unhashable object is no handle of ours
            group = None
        if group is None:
            raise ValueError("not a handle of this swap space, or swapped in already")
        order = list(dict.fromkeys(c for _, table in group for c in table))
        if len(order) > self.pool.n_free:
            raise MemoryError(f"the group needs {len(order)} blocks, the pool has {self.pool.n_free} free")
        new = {}
        for c in order:
            b = new[c] = self.pool.alloc()
            self.pool.k[:, b], self.pool.v[:, b] = self.k[:, c], self.v[:, c]
        self.n_in += len(order)
        seqs = []
        for length, table in group:
            seq = PagedSequence(self.pool)
            seq.blocks, seq.length = [new[c] for c in table], length
            seqs.append(seq)
        seen = set()
        for _, table in group:
            for c in table:
                if c in seen:
                    self.pool.incref(new[c])
                seen.add(c)
        self._cpu_free = sorted(self._cpu_free + order)
        del self._out[handle]
        return seqs
