from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (a): written from the contract with plain Python loops everywhere; the free list is a
# sorted Python list kept with bisect; refcounts in a dict; positions written and gathered one by one.
import bisect
import math

import numpy as np

from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        if not _is_int(n_blocks) or not _is_int(block_size) or n_blocks < 1 or block_size < 1:
            raise ValueError("n_blocks and block_size must be positive integers")
        self.cfg = cfg
        self.n_blocks = int(n_blocks)
        self.block_size = int(block_size)
        self.n_copies = 0
        self.peak_used = 0
        self.k = np.zeros((cfg.n_layers, self.n_blocks, self.block_size, cfg.n_heads, cfg.d_head), dtype=np.float64)
        self.v = np.zeros((cfg.n_layers, self.n_blocks, self.block_size, cfg.n_heads, cfg.d_head), dtype=np.float64)
        self.free_ids = list(range(self.n_blocks))      # always sorted
        self.counts = {}                                  # block -> refcount, only blocks in use

    @property
    def n_used(self):
        return len(self.counts)

    @property
    def n_free(self):
        return len(self.free_ids)

    def _check(self, b, need_used):
        if not _is_int(b):
            raise ValueError(f"block id must be an integer, not {type(b).__name__}")
        b = int(b)
        if b < 0 or b >= self.n_blocks:
            raise ValueError(f"no block {b} in a pool of {self.n_blocks}")
        if need_used and b not in self.counts:
            raise ValueError(f"block {b} is not in use")
        return b

    def alloc(self):
        if len(self.free_ids) == 0:
            raise MemoryError("out of KV blocks")
        b = self.free_ids.pop(0)
        self.counts[b] = 1
        if len(self.counts) > self.peak_used:
            self.peak_used = len(self.counts)
        return b

    def incref(self, b):
        b = self._check(b, True)
        self.counts[b] = self.counts[b] + 1

    def decref(self, b):
        b = self._check(b, True)
        self.counts[b] = self.counts[b] - 1
        if self.counts[b] == 0:
            del self.counts[b]
            bisect.insort(self.free_ids, b)

    def refcount(self, b):
        b = self._check(b, False)
        return self.counts.get(b, 0)

    def copy_block(self, b):
        b = self._check(b, True)
        dst = self.alloc()
        for layer in range(self.cfg.n_layers):
            self.k[layer, dst] = self.k[layer, b]
            self.v[layer, dst] = self.v[layer, b]
        self.n_copies = self.n_copies + 1
        return dst


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def _cow_due(self):
        if self.length % self.pool.block_size == 0 or len(self.blocks) == 0:
            return False
        return self.pool.refcount(self.blocks[-1]) > 1

    def _missing(self, n):
        want = math.ceil((self.length + n) / self.pool.block_size)
        return max(0, want - len(self.blocks))

    def reserve(self, n):
        if not _is_int(n) or n < 1:
            raise ValueError("reserve needs n >= 1")
        cow = 1 if self._cow_due() else 0
        if cow + self._missing(n) > self.pool.n_free:
            raise MemoryError("not enough free blocks")
        if cow:
            old = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(old)
            self.pool.decref(old)
        while self._missing(n) > 0:
            self.blocks.append(self.pool.alloc())

    def write(self, layer, start, k, v):
        B = self.pool.block_size
        for i in range(len(k)):
            p = start + i
            blk = self.blocks[p // B]
            self.pool.k[layer, blk, p % B] = k[i]
            self.pool.v[layer, blk, p % B] = v[i]

    def read(self, layer, length):
        B = self.pool.block_size
        ks, vs = [], []
        for p in range(length):
            blk = self.blocks[p // B]
            ks.append(self.pool.k[layer, blk, p % B])
            vs.append(self.pool.v[layer, blk, p % B])
        shape = (0, self.pool.cfg.n_heads, self.pool.cfg.d_head)
        if not ks:
            return np.zeros(shape), np.zeros(shape)
        return np.array(ks), np.array(vs)

    def fork(self):
        other = PagedSequence(self.pool)
        for b in self.blocks:
            self.pool.incref(b)
            other.blocks.append(b)
        other.length = self.length
        return other

    def free(self):
        for b in self.blocks:
            self.pool.decref(b)
        self.blocks = []
        self.length = 0


def _tokens(cfg, seq, chunk):
    items = list(chunk) if not isinstance(chunk, np.ndarray) else chunk.tolist()
    if isinstance(chunk, np.ndarray) and chunk.ndim != 1:
        raise ValueError("a chunk must be 1-D")
    if len(items) == 0:
        raise ValueError("empty chunk")
    out = []
    for t in items:
        if not _is_int(t):
            raise ValueError(f"token {t!r} is not an integer")
        t = int(t)
        if t < 0 or t >= cfg.vocab:
            raise ValueError(f"token {t} outside [0, {cfg.vocab})")
        out.append(t)
    if seq.length + len(out) > cfg.max_len:
        raise ValueError("sequence would pass max_len")
    return out


def paged_step(params, cfg, seqs, chunks):
    seqs = list(seqs)
    chunks = list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("one chunk per sequence")
    token_lists = []
    for s, c in zip(seqs, chunks):
        token_lists.append(_tokens(cfg, s, c))
    # dry run on refcounts: how many blocks each pool must give
    demand = {}
    pools = {}
    shadow = {}
    for s, t in zip(seqs, token_lists):
        pool = s.pool
        pools[id(pool)] = pool
        extra = 0
        if s.length % pool.block_size != 0:
            last = s.blocks[-1]
            key = (id(pool), last)
            if key not in shadow:
                shadow[key] = pool.refcount(last)
            if shadow[key] > 1:
                shadow[key] -= 1
                extra += 1
        extra += s._missing(len(t))
        demand[id(pool)] = demand.get(id(pool), 0) + extra
    for pid in demand:
        if demand[pid] > pools[pid].n_free:
            raise MemoryError("the step does not fit in the pool")
    for s, t in zip(seqs, token_lists):
        s.reserve(len(t))
    outputs = []
    for s, t in zip(seqs, token_lists):
        start = s.length
        x = embed(params, cfg, np.array(t), start)
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            s.write(layer, start, k, v)
            K, V = s.read(layer, start + len(t))
            x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start))
        s.length = start + len(t)
        outputs.append(unembed(params, cfg, x))
    return outputs


def blockwise_attention(q, seq, layer):
    L = seq.length
    B = seq.pool.block_size
    if L < 1:
        raise ValueError("empty sequence")
    scale = 1.0 / math.sqrt(q.shape[-1])
    nblk = (L + B - 1) // B
    block_scores = []
    block_values = []
    for i in range(nblk):
        b = seq.blocks[i]
        filled = B if i < nblk - 1 else L - (nblk - 1) * B
        kb = seq.pool.k[layer, b, :filled]            # [m, H, Dh]
        s = np.einsum("hd,mhd->hm", q, kb) * scale
        block_scores.append(s)
        block_values.append(seq.pool.v[layer, b, :filled])
    H = q.shape[0]
    out = np.zeros_like(q, dtype=np.float64)
    for h in range(H):
        m = max(float(s[h].max()) for s in block_scores)
        denom = 0.0
        for s in block_scores:
            denom += float(np.exp(s[h] - m).sum())
        acc = np.zeros(q.shape[-1])
        for s, vb in zip(block_scores, block_values):
            acc += (np.exp(s[h] - m) / denom) @ vb[:, h, :]
        out[h] = acc
    return out
