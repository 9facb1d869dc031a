from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (i), with the bonus: the free blocks are a Python set (alloc takes min()), refcounts
# a dict of the blocks in use; the step checks everything, then stores and gathers K/V with its own
# index arithmetic; Part 5 is a TRIE of blocks (a child per next block of tokens, so a key is the path
# from the root) with an OrderedDict for recency. Evicting a node only drops its block: its children
# stay in the trie, cached but unreachable until the node is cached again (no cascade). Part 6 keeps its
# CPU blocks as a numpy mask, hands out ticket numbers as handles and copies a group with one fancy index.
import math
from collections import OrderedDict

import numpy as np

from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _as_id(x):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"not an integer: {x!r}")
    return int(x)


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        self.n_blocks, self.block_size = _as_id(n_blocks), _as_id(block_size)
        if self.n_blocks < 1 or self.block_size < 1:
            raise ValueError("a pool needs at least one block of at least one slot")
        self.cfg = cfg
        shape = (cfg.n_layers, self.n_blocks, self.block_size, cfg.n_heads, cfg.d_head)
        self.k, self.v = np.zeros(shape), np.zeros(shape)
        self.free_set = set(range(self.n_blocks))
        self.refs = {}
        self.n_copies = self.peak_used = 0

    n_used = property(lambda self: len(self.refs))
    n_free = property(lambda self: len(self.free_set))

    def _live(self, b):
        b = _as_id(b)
        if not 0 <= b < self.n_blocks or b not in self.refs:
            raise ValueError(f"block {b} is not a block in use")
        return b

    def alloc(self):
        if not self.free_set:
            raise MemoryError("the pool is full")
        b = min(self.free_set)
        self.free_set.remove(b)
        self.refs[b] = 1
        self.peak_used = max(self.peak_used, len(self.refs))
        return b

    def incref(self, b):
        self.refs[self._live(b)] += 1

    def decref(self, b):
        b = self._live(b)
        self.refs[b] -= 1
        if not self.refs[b]:
            del self.refs[b]
            self.free_set.add(b)

    def refcount(self, b):
        b = _as_id(b)
        if not 0 <= b < self.n_blocks:
            raise ValueError(f"block {b} is outside the pool")
        return self.refs.get(b, 0)

    def copy_block(self, b):
        b = self._live(b)
        c = self.alloc()
        for store in (self.k, self.v):
            store[:, c] = store[:, b]
        self.n_copies += 1
        return c


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def _plan(self, n):
        """(copy due, new blocks) for n more tokens."""
        B = self.pool.block_size
        copy = self.length % B != 0 and self.pool.refcount(self.blocks[-1]) > 1
        return copy, max(0, math.ceil((self.length + n) / B) - len(self.blocks))

    def reserve(self, n):
        n = _as_id(n)
        if n < 1:
            raise ValueError("n must be at least 1")
        copy, new = self._plan(n)
        if copy + new > self.pool.n_free:
            raise MemoryError("reserve does not fit")
        if copy:
            shared = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(shared)
            self.pool.decref(shared)
        self.blocks += [self.pool.alloc() for _ in range(new)]

    def write(self, layer, start, k, v):
        B = self.pool.block_size
        for i in range(len(k)):
            p = start + i
            self.pool.k[layer, self.blocks[p // B], p % B] = k[i]
            self.pool.v[layer, self.blocks[p // B], p % B] = v[i]

    def read(self, layer, length):
        B = self.pool.block_size
        idx = [(self.blocks[p // B], p % B) for p in range(length)]
        K = np.array([self.pool.k[layer, b, s] for b, s in idx]).reshape(length, *self.pool.k.shape[3:])
        V = np.array([self.pool.v[layer, b, s] for b, s in idx]).reshape(length, *self.pool.v.shape[3:])
        return K, V

    def fork(self):
        twin = PagedSequence(self.pool)
        twin.blocks, twin.length = self.blocks[:], self.length
        for b in twin.blocks:
            self.pool.incref(b)
        return twin

    def free(self):
        while self.blocks:
            self.pool.decref(self.blocks.pop())
        self.length = 0


def _tokens(cfg, seq, chunk):
    arr = np.asarray(chunk)
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError("a chunk must be a non-empty 1-D sequence of token ids")
    out = [_as_id(t) for t in arr.tolist()] if arr.dtype == object or arr.dtype.kind in "iu" else None
    if out is None:
        raise ValueError("token ids must be integers")
    if any(t < 0 or t >= cfg.vocab for t in out):
        raise ValueError("token id outside [0, vocab)")
    if seq.length + len(out) > cfg.max_len:
        raise ValueError("the sequence would pass max_len")
    return out


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("seqs and chunks differ in length")
    chunks = [_tokens(cfg, s, c) for s, c in zip(seqs, chunks)]
    pools = {}
    for s, c in zip(seqs, chunks):
        entry = pools.setdefault(id(s.pool), {"pool": s.pool, "new": 0, "writers": {}})
        entry["new"] += s._plan(len(c))[1]
        if s.length % s.pool.block_size:
            entry["writers"][s.blocks[-1]] = entry["writers"].get(s.blocks[-1], 0) + 1
    for e in pools.values():
        copies = sum(min(w, e["pool"].refcount(b) - 1) for b, w in e["writers"].items())
        if e["new"] + copies > e["pool"].n_free:
            raise MemoryError("the step needs more blocks than are free")
    results = []
    for s, c in zip(seqs, chunks):
        s.reserve(len(c))
        start, T, B = s.length, len(c), s.pool.block_size
        pos = np.arange(start + T)
        table = np.array(s.blocks, dtype=np.int64)
        b, slot = table[pos // B], pos % B
        x = embed(params, cfg, np.array(c, dtype=np.int64), start)
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            s.pool.k[layer, b[start:], slot[start:]] = k
            s.pool.v[layer, b[start:], slot[start:]] = v
            x = attn_out(params, cfg, layer, x,
                         attention_core(q, s.pool.k[layer, b, slot], s.pool.v[layer, b, slot], start))
        s.length = start + T
        results.append(unembed(params, cfg, x))
    return results


def blockwise_attention(q, seq, layer):
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("nothing to attend to")
    scale = 1.0 / math.sqrt(q.shape[-1])
    blocks = [(seq.blocks[j], min(B, L - j * B)) for j in range(math.ceil(L / B))]
    scores = [scale * np.einsum("hd,shd->hs", q, seq.pool.k[layer, b, :m]) for b, m in blocks]
    peak = np.max([s.max(axis=1) for s in scores], axis=0)
    weights = [np.exp(s - peak[:, None]) for s in scores]
    norm = np.sum([w.sum(axis=1) for w in weights], axis=0)
    out = np.zeros_like(q, dtype=np.float64)
    for w, (b, m) in zip(weights, blocks):
        out += np.einsum("hs,shd->hd", w, seq.pool.v[layer, b, :m])
    return out / norm[:, None]


class _Node:
    """One full block of tokens after its parent's: `block` is the physical block caching it, or None."""
    __slots__ = ("children", "block")

    def __init__(self):
        self.children, self.block = {}, None


class PrefixCache:
    def __init__(self, pool):
        self.pool = pool
        self.n_hit_tokens = 0
        self._root = _Node()
        self._recent = OrderedDict()       # block -> its node, least recently used first

    @property
    def n_cached(self):
        return len(self._recent)

    def _pieces(self, tokens):
        t = [_as_id(x) for x in np.asarray(tokens).reshape(-1).tolist()]
        B = self.pool.block_size
        return [tuple(t[i * B:(i + 1) * B]) for i in range(len(t) // B)]

    def _path(self, tokens, make=False):
        """The trie nodes of the full blocks of `tokens`, as far as they exist (all, with make=True)."""
        node, path = self._root, []
        for piece in self._pieces(tokens):
            child = node.children.get(piece)
            if child is None:
                if not make:
                    break
                child = node.children[piece] = _Node()
            path.append(child)
            node = child
        return path

    def lookup(self, tokens):
        hits = []
        for node in self._path(tokens)[:max(0, (len(tokens) - 1) // self.pool.block_size)]:
            if node.block is None:
                break
            hits.append(node.block)
        return hits

    def insert(self, tokens, blocks):
        pieces = self._pieces(tokens)
        if len(blocks) < len(pieces):
            raise ValueError("fewer blocks than full blocks of tokens")
        path = self._path(tokens)
        todo = []
        for i in range(len(pieces)):
            if i < len(path) and path[i].block is not None:
                continue
            b = _as_id(blocks[i])
            if b in self._recent:
                continue
            if self.pool.refcount(b) == 0:
                raise ValueError(f"block {b} is free")
            todo.append((i, b))
        path = self._path(tokens, make=True)
        for i, b in todo:
            self.pool.incref(b)
            path[i].block = b
            self._recent[b] = path[i]
        for node in reversed(path):
            if node.block is not None:
                self._recent.move_to_end(node.block)
        return len(todo)

    def _evictable(self, keep=()):
        return [b for b in self._recent if self.pool.refcount(b) == 1 and b not in keep]

    def evict(self, n):
        n = _as_id(n)
        if n < 0:
            raise ValueError("n must be at least 0")
        victims = self._evictable()[:n]
        for b in victims:
            self._recent.pop(b).block = None
            self.pool.decref(b)
        return len(victims)


def cached_prefill(params, cfg, seq, prompt, cache):
    problem = ("a sequence that already holds tokens" if seq.length or seq.blocks
               else "a sequence on another pool" if seq.pool is not cache.pool else None)
    if problem:
        raise ValueError(f"cached_prefill got {problem}")
    prompt = _tokens(cfg, seq, prompt)
    pool = cache.pool
    hits = cache.lookup(prompt)
    short = math.ceil(len(prompt) / pool.block_size) - len(hits) - pool.n_free
    if short > len(cache._evictable(keep=hits)):
        raise MemoryError("not enough free or evictable blocks")
    for b in hits:
        pool.incref(b)
    seq.blocks, seq.length = list(hits), len(hits) * pool.block_size
    if short > 0:
        cache.evict(short)
    (logits,) = paged_step(params, cfg, [seq], [prompt[seq.length:]])
    cache.n_hit_tokens += len(hits) * pool.block_size
    cache.insert(prompt, seq.blocks)
    return logits


# ---------------------------------------------------------------- Part 6: the swap space
class SwapSpace:
    """CPU blocks as a numpy mask; a handle is a ticket number; a group is copied out and in with one
    fancy index per direction."""

    def __init__(self, pool, n_blocks):
        self.pool, self.n_blocks = pool, _as_id(n_blocks)
        cfg = pool.cfg
        shape = (cfg.n_layers, self.n_blocks, pool.block_size, cfg.n_heads, cfg.d_head)
        self.k, self.v = np.zeros(shape), np.zeros(shape)
        self.busy = np.zeros(self.n_blocks, dtype=bool)
        self.n_out = self.n_in = 0
        self.tickets, self.next_ticket = {}, 0

    @property
    def n_free(self):
        return int((~self.busy).sum())

    def swap_out(self, seqs):
        if len(seqs) == 0:
            raise ValueError("an empty group")
        if len(set(map(id, seqs))) != len(seqs) or any(s.pool is not self.pool for s in seqs):
            raise ValueError("a group is distinct sequences of this pool")
        distinct = []
        for s in seqs:
            distinct += [b for b in s.blocks if b not in distinct]
        if len(distinct) > self.n_free:
            raise MemoryError("not enough CPU blocks")
        slots = np.flatnonzero(~self.busy)[:len(distinct)]
        self.busy[slots] = True
        self.k[:, slots] = self.pool.k[:, distinct]
        self.v[:, slots] = self.pool.v[:, distinct]
        where = dict(zip(distinct, slots.tolist()))
        group = [(s.length, [where[b] for b in s.blocks]) for s in seqs]
        for s in seqs:
            s.blocks, old = [], s.blocks
            for b in old:
                self.pool.decref(b)
            s.length = 0
        self.n_out += len(distinct)
        self.next_ticket += 1
        self.tickets[self.next_ticket] = group
        return self.next_ticket

    def swap_in(self, handle):
        group = self.tickets.get(handle) if isinstance(handle, int) else None
        if group is None:
            raise ValueError("no such ticket")
        cpu = []
        for _, table in group:
            cpu += [c for c in table if c not in cpu]
        if len(cpu) > self.pool.n_free:
            raise MemoryError("the pool is short of blocks")
        got = [self.pool.alloc() for _ in cpu]
        self.pool.k[:, got] = self.k[:, cpu]
        self.pool.v[:, got] = self.v[:, cpu]
        new = dict(zip(cpu, got))
        out = []
        for length, table in group:
            seq = PagedSequence(self.pool)
            for c in table:
                if seq.blocks.count(new[c]) or any(new[c] in o.blocks for o in out):
                    self.pool.incref(new[c])
                seq.blocks.append(new[c])
            seq.length = length
            out.append(seq)
        self.busy[cpu] = False
        self.n_in += len(cpu)
        del self.tickets[handle]
        return out
