from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (g): all-or-nothing by transaction instead of counting first: paged_step (and reserve)
# snapshot the pool's bookkeeping and the tables, try, and on MemoryError restore everything (refcounts,
# free heap, peak_used, n_copies, tables) before re-raising. Block ids handed out are numpy int64
# (the contract: "numpy integers are accepted by the tests").
import heapq

import numpy as np

from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _int(x, what):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{what}: integer expected")
    return int(x)


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        n_blocks, block_size = _int(n_blocks, "n_blocks"), _int(block_size, "block_size")
        if min(n_blocks, block_size) < 1:
            raise ValueError("n_blocks, block_size >= 1")
        self.cfg, self.n_blocks, self.block_size = cfg, n_blocks, block_size
        shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)
        self.k, self.v = np.zeros(shape), np.zeros(shape)
        self.n_copies, self.peak_used = 0, 0
        self._ref = np.zeros(n_blocks, dtype=np.int64)
        self._heap = list(range(n_blocks))

    n_used = property(lambda self: self.n_blocks - len(self._heap))
    n_free = property(lambda self: len(self._heap))

    def snapshot(self):
        return self._ref.copy(), list(self._heap), self.peak_used, self.n_copies

    def restore(self, snap):
        ref, heap, self.peak_used, self.n_copies = snap
        self._ref[:] = ref
        self._heap = list(heap)

    def _valid(self, b, live=True):
        b = _int(b, "block id")
        if b < 0 or b >= self.n_blocks or (live and self._ref[b] == 0):
            raise ValueError(f"block {b}: {'out of range' if b < 0 or b >= self.n_blocks else 'not in use'}")
        return b

    def alloc(self):
        if not self._heap:
            raise MemoryError("pool exhausted")
        b = heapq.heappop(self._heap)
        self._ref[b] = 1
        self.peak_used = max(self.peak_used, self.n_used)
        return np.int64(b)

    def incref(self, b):
        self._ref[self._valid(b)] += 1

    def decref(self, b):
        b = self._valid(b)
        self._ref[b] -= 1
        if self._ref[b] == 0:
            heapq.heappush(self._heap, b)

    def refcount(self, b):
        return int(self._ref[self._valid(b, live=False)])

    def copy_block(self, b):
        b = self._valid(b)
        c = self.alloc()
        self.k[:, c] = self.k[:, b]
        self.v[:, c] = self.v[:, b]
        self.n_copies += 1
        return c


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def _reserve(self, n):
        B = self.pool.block_size
        if self.length % B and self.pool.refcount(self.blocks[-1]) > 1:
            shared = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(shared)
            self.pool.decref(shared)
        while len(self.blocks) * B < self.length + n:
            self.blocks.append(self.pool.alloc())

    def reserve(self, n):
        n = _int(n, "n")
        if n < 1:
            raise ValueError("reserve: n >= 1")
        _transaction(self.pool, [self], lambda: self._reserve(n))

    def _pos(self, start, stop):
        p = np.arange(start, stop)
        return np.array(self.blocks, dtype=np.int64)[p // self.pool.block_size], p % self.pool.block_size

    def write(self, layer, start, k, v):
        b, s = self._pos(start, start + len(k))
        self.pool.k[layer, b, s] = k
        self.pool.v[layer, b, s] = v

    def read(self, layer, length):
        b, s = self._pos(0, length)
        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]

    def fork(self):
        child = PagedSequence(self.pool)
        child.blocks = [b for b in self.blocks]
        child.length = self.length
        for b in child.blocks:
            self.pool.incref(b)
        return child

    def free(self):
        for b in self.blocks:
            self.pool.decref(b)
        self.blocks = []
        self.length = 0


def _transaction(pool_or_none, seqs, action):
    """Run action(); on MemoryError put every touched pool and table back as it was, then re-raise."""
    pools = {id(s.pool): s.pool for s in seqs}
    snaps = {pid: p.snapshot() for pid, p in pools.items()}
    tables = [list(s.blocks) for s in seqs]
    try:
        action()
    except MemoryError:
        for pid, p in pools.items():
            p.restore(snaps[pid])
        for s, t in zip(seqs, tables):
            s.blocks = t
        raise


def _tokens(cfg, seq, chunk):
    a = np.asarray(chunk)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("chunk: non-empty 1-D")
    if a.dtype.kind not in "iu":
        if a.dtype != object:
            raise ValueError("chunk: integer token ids")
        a = np.array([_int(t, "token") for t in a], dtype=np.int64)
    if a.min() < 0 or a.max() >= cfg.vocab:
        raise ValueError("token id out of range")
    if seq.length + a.size > cfg.max_len:
        raise ValueError("max_len")
    return a.astype(np.int64)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("seqs and chunks differ in length")
    chunks = [_tokens(cfg, s, c) for s, c in zip(seqs, chunks)]

    def reserve_all():
        for s, c in zip(seqs, chunks):
            s._reserve(c.size)

    _transaction(None, seqs, reserve_all)
    out = []
    for s, c in zip(seqs, chunks):
        p0, T = s.length, c.size
        x = embed(params, cfg, c, p0)
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            s.write(layer, p0, k, v)
            K, V = s.read(layer, p0 + T)
            x = attn_out(params, cfg, layer, x, attention_core(q, K, V, p0))
        s.length = p0 + T
        out.append(unembed(params, cfg, x))
    return out


def blockwise_attention(q, seq, layer):
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("empty")
    chunks = [(seq.blocks[i], min(B, L - i * B)) for i in range((L - 1) // B + 1)]
    s = [np.einsum("hd,nhd->hn", q, seq.pool.k[layer, b, :m]) / np.sqrt(q.shape[-1]) for b, m in chunks]
    mx = np.max(np.concatenate([x.max(axis=1, keepdims=True) for x in s], axis=1), axis=1, keepdims=True)
    e = [np.exp(x - mx) for x in s]
    z = np.sum(np.concatenate([x.sum(axis=1, keepdims=True) for x in e], axis=1), axis=1, keepdims=True)
    return np.sum([np.einsum("hn,nhd->hd", w / z, seq.pool.v[layer, b, :m]) for w, (b, m) in zip(e, chunks)], axis=0)
