from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (c): a set of free ids (alloc takes min()), refcounts in a list; blockwise attention
# is flash-style: one pass over the blocks with a running max, running normaliser and running output,
# rescaled whenever the max grows. The step runs layer-major (all sequences through a layer, then the
# next) and counts its blocks by simulating the reserves on a copy of
# the refcounts.
import numbers

import numpy as np

from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _bid(x):
    if isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    raise ValueError("block ids are integers")


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x > 0 for x in (n_blocks, block_size)):
            raise ValueError("n_blocks and block_size: positive integers")
        self.cfg = cfg
        self.n_blocks, self.block_size = int(n_blocks), int(block_size)
        self.n_copies = 0
        self.peak_used = 0
        shape = (cfg.n_layers, self.n_blocks, self.block_size, cfg.n_heads, cfg.d_head)
        self.k = np.zeros(shape, dtype=np.float64)
        self.v = np.zeros(shape, dtype=np.float64)
        self._rc = [0] * self.n_blocks
        self._avail = set(range(self.n_blocks))

    @property
    def n_free(self):
        return len(self._avail)

    @property
    def n_used(self):
        return self.n_blocks - len(self._avail)

    def _valid(self, b):
        b = _bid(b)
        if b < 0 or b >= self.n_blocks:
            raise ValueError(f"block id {b} out of range")
        return b

    def _live(self, b):
        b = self._valid(b)
        if self._rc[b] < 1:
            raise ValueError(f"block {b} is free")
        return b

    def alloc(self):
        if not self._avail:
            raise MemoryError("KV pool is full")
        b = min(self._avail)
        self._avail.remove(b)
        self._rc[b] = 1
        self.peak_used = max(self.peak_used, self.n_used)
        return b

    def incref(self, b):
        b = self._live(b)
        self._rc[b] += 1

    def decref(self, b):
        b = self._live(b)
        self._rc[b] -= 1
        if self._rc[b] == 0:
            self._avail.add(b)

    def refcount(self, b):
        return self._rc[self._valid(b)]

    def copy_block(self, b):
        b = self._live(b)
        c = self.alloc()
        np.copyto(self.k[:, c], self.k[:, b])
        np.copyto(self.v[:, c], self.v[:, b])
        self.n_copies += 1
        return c


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def _needs(self, n, rc):
        """Blocks that reserving n tokens takes, given refcounts rc (a list, updated in place)."""
        B = self.pool.block_size
        copies = 0
        if self.length % B and rc[self.blocks[-1]] > 1:
            rc[self.blocks[-1]] -= 1
            copies = 1
        return copies + max(0, (self.length + n + B - 1) // B - len(self.blocks))

    def reserve(self, n):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError("reserve(n) needs an integer n >= 1")
        if self._needs(n, list(self.pool._rc)) > self.pool.n_free:
            raise MemoryError("cannot reserve")
        B = self.pool.block_size
        if self.length % B and self.pool.refcount(self.blocks[-1]) > 1:
            old = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(old)
            self.pool.decref(old)
        while len(self.blocks) * B < self.length + n:
            self.blocks.append(self.pool.alloc())

    def _where(self, start, stop):
        B = self.pool.block_size
        idx = np.arange(start, stop)
        return [self.blocks[i] for i in (idx // B)], idx % B

    def write(self, layer, start, k, v):
        blocks, offs = self._where(start, start + len(k))
        self.pool.k[layer, blocks, offs] = k
        self.pool.v[layer, blocks, offs] = v

    def read(self, layer, length):
        blocks, offs = self._where(0, length)
        return self.pool.k[layer, blocks, offs], self.pool.v[layer, blocks, offs]

    def fork(self):
        new = PagedSequence(self.pool)
        new.blocks = list(self.blocks)
        new.length = self.length
        for b in new.blocks:
            self.pool.incref(b)
        return new

    def free(self):
        blocks, self.blocks, self.length = self.blocks, [], 0
        for b in blocks:
            self.pool.decref(b)


def _clean(cfg, length, chunk):
    arr = np.asarray(chunk)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError("need a non-empty 1-D chunk")
    if arr.dtype.kind not in "iu":
        if arr.dtype != object or not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in arr):
            raise ValueError("tokens must be integers")
        arr = arr.astype(np.int64)
    if int(arr.min()) < 0 or int(arr.max()) >= cfg.vocab:
        raise ValueError("token outside the vocabulary")
    if length + arr.shape[0] > cfg.max_len:
        raise ValueError("too long")
    return arr.astype(np.int64)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("mismatched seqs and chunks")
    chunks = [_clean(cfg, s.length, c) for s, c in zip(seqs, chunks)]
    sims = {}
    for s, c in zip(seqs, chunks):
        pool = s.pool
        rc, total = sims.get(id(pool), (list(pool._rc), 0))
        sims[id(pool)] = (rc, total + s._needs(len(c), rc))
    for s in seqs:
        if sims[id(s.pool)][1] > s.pool.n_free:
            raise MemoryError("not enough KV blocks for this step")
    for s, c in zip(seqs, chunks):
        s.reserve(len(c))
    # layer-major: every sequence's hidden state goes through layer 0, then all through layer 1, ...
    starts = [s.length for s in seqs]
    hidden = [embed(params, cfg, c, t0) for c, t0 in zip(chunks, starts)]
    for layer in range(cfg.n_layers):
        for i, (s, t0) in enumerate(zip(seqs, starts)):
            q, k, v = qkv(params, cfg, layer, hidden[i])
            s.write(layer, t0, k, v)
            keys, vals = s.read(layer, t0 + k.shape[0])
            hidden[i] = attn_out(params, cfg, layer, hidden[i], attention_core(q, keys, vals, t0))
    for s, c, t0 in zip(seqs, chunks, starts):
        s.length = t0 + c.shape[0]
    return [unembed(params, cfg, h) for h in hidden]


def blockwise_attention(q, seq, layer):
    """Flash-style: running max m, running normaliser l and running (unnormalised) output acc."""
    n, B = seq.length, seq.pool.block_size
    if n < 1:
        raise ValueError("need at least one position")
    H, D = q.shape
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, D))
    inv = 1.0 / np.sqrt(D)
    for j in range((n + B - 1) // B):
        b = seq.blocks[j]
        cnt = min(B, n - j * B)
        s = np.einsum("hd,thd->ht", q, seq.pool.k[layer, b, :cnt]) * inv
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = l * alpha + p.sum(axis=1)
        acc = acc * alpha[:, None] + np.einsum("ht,thd->hd", p, seq.pool.v[layer, b, :cnt])
        m = m_new
    return acc / l[:, None]
