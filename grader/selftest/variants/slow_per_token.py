from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (e): deliberately slow (about 10x the reference on a typical workload) but exact:
# K/V written and gathered one token and one head at a time, attention computed one query position, one
# head and one key at a time with its own three-pass softmax (no attention_core), blockwise attention one
# key at a time.
# A grader must give it full marks within its time limits.
import math

import numpy as np

from transformer_lab import attn_out, embed, qkv, unembed


def _int(x):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError("expected an integer")
    return int(x)


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        n_blocks, block_size = _int(n_blocks), _int(block_size)
        if n_blocks < 1 or block_size < 1:
            raise ValueError("bad pool size")
        self.cfg, self.n_blocks, self.block_size = cfg, n_blocks, block_size
        self.k = np.zeros((cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head))
        self.v = np.zeros((cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head))
        self.n_copies = 0
        self.peak_used = 0
        self.rc = [0] * n_blocks

    @property
    def n_used(self):
        return sum(1 for r in self.rc if r > 0)          # recounted every time, on purpose

    @property
    def n_free(self):
        return sum(1 for r in self.rc if r == 0)

    def _range(self, b):
        b = _int(b)
        if not 0 <= b < self.n_blocks:
            raise ValueError("block id out of range")
        return b

    def _used(self, b):
        b = self._range(b)
        if self.rc[b] == 0:
            raise ValueError("block is free")
        return b

    def alloc(self):
        for b in range(self.n_blocks):               # linear scan from 0: the lowest free block
            if self.rc[b] == 0:
                self.rc[b] = 1
                self.peak_used = max(self.peak_used, self.n_used)
                return b
        raise MemoryError("no free blocks")

    def incref(self, b):
        self.rc[self._used(b)] += 1

    def decref(self, b):
        self.rc[self._used(b)] -= 1

    def refcount(self, b):
        return self.rc[self._range(b)]

    def copy_block(self, b):
        b = self._used(b)
        c = self.alloc()
        for layer in range(self.cfg.n_layers):
            for s in range(self.block_size):
                self.k[layer, c, s] = self.k[layer, b, s]
                self.v[layer, c, s] = self.v[layer, b, s]
        self.n_copies += 1
        return c


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def _copy_due(self):
        return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1

    def _grow(self, n):
        need = 0
        while (len(self.blocks) + need) * self.pool.block_size < self.length + n:
            need += 1
        return need

    def reserve(self, n):
        n = _int(n)
        if n < 1:
            raise ValueError("n < 1")
        if int(self._copy_due()) + self._grow(n) > self.pool.n_free:
            raise MemoryError("pool too small")
        if self._copy_due():
            shared = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(shared)
            self.pool.decref(shared)
        for _ in range(self._grow(n)):
            self.blocks.append(self.pool.alloc())

    def write(self, layer, start, k, v):
        B = self.pool.block_size
        for i in range(len(k)):
            p = start + i
            for h in range(k.shape[1]):
                self.pool.k[layer, self.blocks[p // B], p % B, h, :] = k[i, h, :]
                self.pool.v[layer, self.blocks[p // B], p % B, h, :] = v[i, h, :]

    def read(self, layer, length):
        B, cfg = self.pool.block_size, self.pool.cfg
        K = np.empty((length, cfg.n_heads, cfg.d_head))
        V = np.empty((length, cfg.n_heads, cfg.d_head))
        for p in range(length):
            for h in range(cfg.n_heads):
                K[p, h] = self.pool.k[layer, self.blocks[p // B], p % B, h]
                V[p, h] = self.pool.v[layer, self.blocks[p // B], p % B, h]
        return K, V

    def fork(self):
        f = PagedSequence(self.pool)
        for b in self.blocks:
            self.pool.incref(b)
            f.blocks.append(b)
        f.length = self.length
        return f

    def free(self):
        for b in self.blocks:
            self.pool.decref(b)
        self.blocks = []
        self.length = 0


def _dot(a, b):
    total = 0.0
    for x, y in zip(a, b):
        total += x * y
    return total


def _attend(q, K, V, start):
    """Causal attention one query position, one head and one key at a time, in three passes (max, sum,
    weighted sum), recomputing each score in every pass (the last two as pure-Python dot products)."""
    T, H, D = q.shape
    scale = 1.0 / math.sqrt(D)
    out = np.zeros((T, H, D))
    for i in range(T):
        for h in range(H):
            qh = q[i, h].tolist()
            keys = range(start + i + 1)
            top = max(float(np.dot(q[i, h], K[j, h])) * scale for j in keys)
            total = sum(math.exp(_dot(qh, K[j, h].tolist()) * scale - top) for j in keys)
            acc = np.zeros(D)
            for j in keys:
                acc += (math.exp(_dot(qh, K[j, h].tolist()) * scale - top) / total) * V[j, h]
            out[i, h] = acc
    return out


def _tokens(cfg, seq, chunk):
    t = np.asarray(chunk)
    if t.ndim != 1 or t.size == 0:
        raise ValueError("chunk must be non-empty and 1-D")
    vals = [_int(x) for x in t.tolist()] if t.dtype == object else None
    if vals is None:
        if t.dtype.kind not in "iu":
            raise ValueError("token ids must be integers")
        vals = [int(x) for x in t]
    for x in vals:
        if x < 0 or x >= cfg.vocab:
            raise ValueError("token out of range")
    if seq.length + len(vals) > cfg.max_len:
        raise ValueError("past max_len")
    return np.array(vals, dtype=np.int64)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("len mismatch")
    chunks = [_tokens(cfg, s, c) for s, c in zip(seqs, chunks)]
    pools, rc, need = {}, {}, {}
    for s, c in zip(seqs, chunks):
        pools[id(s.pool)] = s.pool
        n = s._grow(len(c))
        if s.length % s.pool.block_size:
            key = (id(s.pool), s.blocks[-1])
            rc.setdefault(key, s.pool.refcount(s.blocks[-1]))
            if rc[key] > 1:
                rc[key] -= 1
                n += 1
        need[id(s.pool)] = need.get(id(s.pool), 0) + n
    for pid, n in need.items():
        if n > pools[pid].n_free:
            raise MemoryError("step does not fit")
    for s, c in zip(seqs, chunks):
        s.reserve(len(c))
    out = []
    for s, c in zip(seqs, chunks):
        start = s.length
        x = embed(params, cfg, c, start)
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            s.write(layer, start, k, v)
            K, V = s.read(layer, start + len(c))
            x = attn_out(params, cfg, layer, x, _attend(q, K, V, start))
        s.length = start + len(c)
        out.append(unembed(params, cfg, x))
    return out


def blockwise_attention(q, seq, layer):
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("length < 1")
    H, D = q.shape
    scores = []                        # per block: [H, m]
    for i in range(-(-L // B)):
        b = seq.blocks[i]
        m = min(B, L - i * B)
        sc = np.empty((H, m))
        for j in range(m):
            for h in range(H):
                sc[h, j] = float(q[h] @ seq.pool.k[layer, b, j, h]) / math.sqrt(D)
        scores.append(sc)
    top = np.max([s.max(axis=1) for s in scores], axis=0)
    total = np.sum([np.exp(s - top[:, None]).sum(axis=1) for s in scores], axis=0)
    out = np.zeros((H, D))
    for i, s in enumerate(scores):
        b = seq.blocks[i]
        w = np.exp(s - top[:, None]) / total[:, None]
        for j in range(s.shape[1]):
            out += w[:, j, None] * seq.pool.v[layer, b, j]
    return out
