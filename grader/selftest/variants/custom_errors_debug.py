from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (d): the student's own exception classes (subclasses of the contract's MemoryError and
# ValueError), numpy integers everywhere inside the pool (an int64 free array, an int64 refcount array),
# Python ints handed out by alloc/copy_block, and debug printing left in (stdout and stderr): a grader
# must not mistake any of this for a failure.
import sys

import numpy as np
from transformer_lab import attention_core, attn_out, embed, qkv, unembed

DEBUG = True
print("[paged_kv] debug build loaded", flush=True)


def _dbg(*a, err=False):
    if DEBUG:
        print("[paged_kv]", *a, file=sys.stderr if err else sys.stdout)


class PoolExhausted(MemoryError):
    """No free KV block."""


class BadBlock(ValueError):
    """A block id that is out of range or not in use."""


class BadInput(ValueError):
    """A step's input that the contract rejects."""


def _as_id(b):
    if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, np.integer)):
        raise BadBlock(f"block id {b!r} is not an integer")
    return np.int64(b)


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        for x in (n_blocks, block_size):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
                raise BadInput("n_blocks and block_size must be integers >= 1")
        self.cfg = cfg
        self.n_blocks, self.block_size = int(n_blocks), int(block_size)
        self.k = np.zeros((cfg.n_layers, self.n_blocks, self.block_size, cfg.n_heads, cfg.d_head))
        self.v = np.zeros_like(self.k)
        self.n_copies = 0
        self._rc = np.zeros(self.n_blocks, dtype=np.int64)
        self._free = np.arange(self.n_blocks, dtype=np.int64)      # sorted ascending
        self._peak = np.int64(0)

    @property
    def n_used(self):
        return int(self.n_blocks - self._free.size)

    @property
    def n_free(self):
        return int(self._free.size)

    @property
    def peak_used(self):
        return int(self._peak)

    def _checked(self, b, in_use):
        b = _as_id(b)
        if b < 0 or b >= self.n_blocks:
            raise BadBlock(f"block {b} outside [0, {self.n_blocks})")
        if in_use and self._rc[b] == 0:
            raise BadBlock(f"block {b} is not in use")
        return b

    def alloc(self):
        if self._free.size == 0:
            raise PoolExhausted(f"all {self.n_blocks} blocks in use")
        b, self._free = self._free[0], self._free[1:]
        self._rc[b] = 1
        self._peak = max(self._peak, np.int64(self.n_used))
        return int(b)

    def incref(self, b):
        b = self._checked(b, True)
        self._rc[b] += 1

    def decref(self, b):
        b = self._checked(b, True)
        self._rc[b] -= 1
        if self._rc[b] == 0:
            self._free = np.insert(self._free, np.searchsorted(self._free, b), b)

    def refcount(self, b):
        return int(self._rc[self._checked(b, False)])

    def copy_block(self, b):
        b = self._checked(b, True)
        dst = self.alloc()
        self.k[:, dst] = self.k[:, b]
        self.v[:, dst] = self.v[:, b]
        self.n_copies += 1
        _dbg(f"copy-on-write: block {int(b)} -> {dst}", err=True)
        return dst


class PagedSequence:
    def __init__(self, pool):
        self.pool = pool
        self.blocks = []
        self.length = 0

    def __repr__(self):
        return f"PagedSequence(length={self.length}, blocks={self.blocks})"

    def _shared_tail(self):
        return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1

    def _new_needed(self, n):
        cap = len(self.blocks) * self.pool.block_size
        short = self.length + n - cap
        return 0 if short <= 0 else -(-short // self.pool.block_size)

    def reserve(self, n):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise BadInput(f"reserve({n!r}): n must be >= 1")
        need = int(self._shared_tail()) + self._new_needed(int(n))
        if need > self.pool.n_free:
            raise PoolExhausted(f"reserve needs {need} blocks, {self.pool.n_free} free")
        if self._shared_tail():
            old = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(old)
            self.pool.decref(old)
        for _ in range(self._new_needed(int(n))):
            self.blocks.append(self.pool.alloc())

    def write(self, layer, start, k, v):
        B = self.pool.block_size
        for first in range(start - start % B, start + len(k), B):       # one block at a time
            lo, hi = max(first, start), min(first + B, start + len(k))
            b = self.blocks[first // B]
            self.pool.k[layer, b, lo - first:hi - first] = k[lo - start:hi - start]
            self.pool.v[layer, b, lo - first:hi - first] = v[lo - start:hi - start]

    def read(self, layer, length):
        B = self.pool.block_size
        nb = -(-length // B)
        K = np.concatenate([self.pool.k[layer, self.blocks[i]] for i in range(nb)], axis=0)[:length] if nb else \
            np.zeros((0, self.pool.cfg.n_heads, self.pool.cfg.d_head))
        V = np.concatenate([self.pool.v[layer, self.blocks[i]] for i in range(nb)], axis=0)[:length] if nb else \
            np.zeros((0, self.pool.cfg.n_heads, self.pool.cfg.d_head))
        return K, V

    def fork(self):
        child = PagedSequence(self.pool)
        child.length = self.length
        for b in self.blocks:
            self.pool.incref(b)
            child.blocks.append(b)
        return child

    def free(self):
        for b in reversed(self.blocks):
            self.pool.decref(b)
        self.blocks.clear()
        self.length = 0


def _check(cfg, seq, chunk):
    toks = np.asarray(chunk)
    if toks.ndim != 1:
        raise BadInput("chunk must be 1-D")
    if toks.size == 0:
        raise BadInput("empty chunk")
    if toks.dtype == object:
        for t in toks:
            _as_id(t)
        toks = toks.astype(np.int64)
    if toks.dtype.kind not in "iu":
        raise BadInput(f"token ids of dtype {toks.dtype}")
    if (toks < 0).any() or (toks >= cfg.vocab).any():
        raise BadInput(f"token ids must be in [0, {cfg.vocab})")
    if seq.length + toks.size > cfg.max_len:
        raise BadInput(f"length {seq.length} + {toks.size} > max_len {cfg.max_len}")
    return toks.astype(np.int64)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise BadInput(f"{len(seqs)} seqs, {len(chunks)} chunks")
    chunks = [_check(cfg, s, c) for s, c in zip(seqs, chunks)]
    _dbg(f"step: {len(seqs)} sequences, chunk sizes {[int(c.size) for c in chunks]}")
    need, rc = {}, {}
    for s, c in zip(seqs, chunks):
        key = id(s.pool)
        n = s._new_needed(c.size)
        if s.length % s.pool.block_size:
            last = (key, s.blocks[-1])
            rc.setdefault(last, s.pool.refcount(s.blocks[-1]))
            if rc[last] > 1:
                rc[last] -= 1
                n += 1
        need[key] = need.get(key, 0) + n
    for s in seqs:
        if need[id(s.pool)] > s.pool.n_free:
            raise PoolExhausted(f"step needs {need[id(s.pool)]} blocks, {s.pool.n_free} free")
    for s, c in zip(seqs, chunks):
        s.reserve(int(c.size))
    out = []
    for s, c in zip(seqs, chunks):
        start, T = s.length, int(c.size)
        x = embed(params, cfg, c, start)
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, x)
            s.write(layer, start, k, v)
            K, V = s.read(layer, start + T)
            x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start))
        s.length = start + T
        out.append(unembed(params, cfg, x))
    _dbg(f"step done: lengths {[s.length for s in seqs]}")
    return out


def blockwise_attention(q, seq, layer):
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise BadInput("blockwise_attention on an empty sequence")
    per_block = []
    for i in range(-(-L // B)):
        blk = seq.blocks[i]
        m = min(B, L - i * B)
        k = seq.pool.k[layer, blk, :m]
        per_block.append((np.einsum("hd,mhd->hm", q, k) / np.sqrt(q.shape[1]), seq.pool.v[layer, blk, :m]))
    mx = np.max(np.stack([s.max(axis=1) for s, _ in per_block], axis=1), axis=1, keepdims=True)
    den = sum(np.exp(s - mx).sum(axis=1, keepdims=True) for s, _ in per_block)
    return sum(np.einsum("hm,mhd->hd", np.exp(s - mx) / den, v) for s, v in per_block)
