from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (f): dataclasses, and a paged_step that batches: sequences whose chunks have the same
# length run through qkv / attention / attn_out / unembed together as one [G, T, ...] batch, with K/V
# gathered from the pool into a padded [G, S, H, Dh] tensor and a per-sequence causal mask (its own
# attention, not attention_core). Numerically equal to the per-sequence computation to ~1e-15.
from dataclasses import dataclass, field
from typing import List

import numpy as np

from transformer_lab import Config, attn_out, embed, qkv, unembed


def _whole(x, what="value"):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {type(x).__name__}")
    return int(x)


@dataclass(eq=False)
class BlockPool:
    cfg: Config
    n_blocks: int
    block_size: int
    n_copies: int = field(default=0, init=False)
    peak_used: int = field(default=0, init=False)
    k: np.ndarray = field(init=False, repr=False)
    v: np.ndarray = field(init=False, repr=False)
    _refs: List[int] = field(init=False, repr=False)

    def __post_init__(self):
        self.n_blocks = _whole(self.n_blocks, "n_blocks")
        self.block_size = _whole(self.block_size, "block_size")
        if self.n_blocks < 1 or self.block_size < 1:
            raise ValueError("n_blocks and block_size must be >= 1")
        c = self.cfg
        self.k = np.zeros((c.n_layers, self.n_blocks, self.block_size, c.n_heads, c.d_head), np.float64)
        self.v = np.zeros((c.n_layers, self.n_blocks, self.block_size, c.n_heads, c.d_head), np.float64)
        self._refs = [0] * self.n_blocks

    @property
    def n_used(self) -> int:
        return self.n_blocks - self._refs.count(0)

    @property
    def n_free(self) -> int:
        return self._refs.count(0)

    def _id(self, b, live):
        b = _whole(b, "block id")
        if b < 0 or b >= self.n_blocks:
            raise ValueError(f"block id {b} not in [0, {self.n_blocks})")
        if live and not self._refs[b]:
            raise ValueError(f"block {b} is free")
        return b

    def alloc(self) -> int:
        try:
            b = self._refs.index(0)
        except ValueError:
            raise MemoryError("no free block") from None
        self._refs[b] = 1
        self.peak_used = max(self.peak_used, self.n_used)
        return b

    def incref(self, b) -> None:
        self._refs[self._id(b, True)] += 1

    def decref(self, b) -> None:
        self._refs[self._id(b, True)] -= 1

    def refcount(self, b) -> int:
        return self._refs[self._id(b, False)]

    def copy_block(self, b) -> int:
        b = self._id(b, True)
        nb = self.alloc()
        self.k[:, nb], self.v[:, nb] = self.k[:, b], self.v[:, b]
        self.n_copies += 1
        return nb


@dataclass
class PagedSequence:
    pool: BlockPool
    blocks: List[int] = field(default_factory=list)
    length: int = 0

    def _cow(self) -> bool:
        return bool(self.length % self.pool.block_size) and self.pool.refcount(self.blocks[-1]) > 1

    def _more(self, n) -> int:
        B = self.pool.block_size
        return max(0, (self.length + n + B - 1) // B - len(self.blocks))

    def reserve(self, n) -> None:
        n = _whole(n, "n")
        if n < 1:
            raise ValueError("reserve needs n >= 1")
        if self._cow() + self._more(n) > self.pool.n_free:
            raise MemoryError("not enough free blocks to reserve")
        if self._cow():
            old = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(old)
            self.pool.decref(old)
        self.blocks += [self.pool.alloc() for _ in range(self._more(n))]

    def _index(self, start, stop):
        B = self.pool.block_size
        pos = np.arange(start, stop)
        return np.asarray(self.blocks, dtype=np.intp)[pos // B], pos % B

    def write(self, layer, start, k, v) -> None:
        b, s = self._index(start, start + len(k))
        self.pool.k[layer, b, s], self.pool.v[layer, b, s] = k, v

    def read(self, layer, length):
        b, s = self._index(0, length)
        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]

    def fork(self) -> "PagedSequence":
        for b in self.blocks:
            self.pool.incref(b)
        return PagedSequence(self.pool, list(self.blocks), self.length)

    def free(self) -> None:
        for b in self.blocks:
            self.pool.decref(b)
        self.blocks, self.length = [], 0


def _ids(cfg, seq, chunk):
    a = np.asarray(chunk)
    if a.ndim != 1 or not a.size:
        raise ValueError("each chunk: a non-empty 1-D list of token ids")
    if a.dtype.kind not in "iu":
        if a.dtype.kind != "O":
            raise ValueError("token ids must be integers")
        a = np.array([_whole(t, "token id") for t in a], dtype=np.int64)
    if a.min() < 0 or a.max() >= cfg.vocab:
        raise ValueError(f"token ids must be in [0, {cfg.vocab})")
    if seq.length + a.size > cfg.max_len:
        raise ValueError(f"would pass max_len {cfg.max_len}")
    return a.astype(np.int64)


def _demand(seqs, chunks):
    """Blocks each pool must hand out for this step (new blocks + copy-on-write copies)."""
    pools, need, holders = {}, {}, {}
    for s, c in zip(seqs, chunks):
        pools[id(s.pool)] = s.pool
        need[id(s.pool)] = need.get(id(s.pool), 0) + s._more(c.size)
        if s.length % s.pool.block_size:
            key = (id(s.pool), s.blocks[-1])
            holders[key] = holders.get(key, 0) + 1
    for (pid, b), n in holders.items():
        need[pid] += min(n, pools[pid].refcount(b) - 1)
    return [(pools[pid], n) for pid, n in need.items()]


def _masked_attention(q, K, V, starts, lens):
    """q [G, T, H, Dh]; K, V [G, S, H, Dh] (padded); query i of row g sees keys 0..starts[g]+i."""
    G, T, H, Dh = q.shape
    S = K.shape[1]
    scores = np.einsum("gthd,gshd->ghts", q, K) / np.sqrt(Dh)
    limit = starts[:, None] + np.arange(T)[None, :]                 # [G, T]
    visible = np.arange(S)[None, None, :] <= limit[:, :, None]      # [G, T, S]
    scores = np.where(visible[:, None], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("ghts,gshd->gthd", p, V)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("need exactly one chunk per sequence")
    chunks = [_ids(cfg, s, c) for s, c in zip(seqs, chunks)]
    for pool, n in _demand(seqs, chunks):
        if n > pool.n_free:
            raise MemoryError(f"step needs {n} blocks; {pool.n_free} free")
    for s, c in zip(seqs, chunks):
        s.reserve(c.size)
    out = [None] * len(seqs)
    groups = {}
    for i, c in enumerate(chunks):
        groups.setdefault(c.size, []).append(i)
    for T, idx in groups.items():
        starts = np.array([seqs[i].length for i in idx])
        x = np.stack([embed(params, cfg, chunks[i], int(st)) for i, st in zip(idx, starts)])   # [G, T, D]
        S = int(starts.max()) + T
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            K = np.zeros((len(idx), S, cfg.n_heads, cfg.d_head))
            V = np.zeros_like(K)
            for g, i in enumerate(idx):
                seqs[i].write(layer, int(starts[g]), k[g], v[g])
                n = int(starts[g]) + T
                K[g, :n], V[g, :n] = seqs[i].read(layer, n)
            x = attn_out(params, cfg, layer, x, _masked_attention(q, K, V, starts, T))
        logits = unembed(params, cfg, x)
        for g, i in enumerate(idx):
            seqs[i].length = int(starts[g]) + T
            out[i] = logits[g]
    return out


def blockwise_attention(q, seq, layer):
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("blockwise_attention: sequence is empty")
    nb = (L + B - 1) // B
    parts = []
    for j in range(nb):
        keys = seq.pool.k[layer, seq.blocks[j], : min(B, L - j * B)]
        parts.append(np.einsum("hd,khd->hk", q, keys) / np.sqrt(q.shape[-1]))
    peak = np.max([p.max(-1) for p in parts], axis=0)
    expd = [np.exp(p - peak[:, None]) for p in parts]
    norm = np.sum([e.sum(-1) for e in expd], axis=0)
    res = np.zeros_like(q, dtype=np.float64)
    for j, e in enumerate(expd):
        res += np.einsum("hk,khd->hd", e, seq.pool.v[layer, seq.blocks[j], : e.shape[-1]])
    return res / norm[:, None]
