from decoding import beam_search, parallel_sample  # noqa: F401
# Correct variant (b): refcounts in one int64 ndarray; the free blocks are the mask refs == 0 and alloc
# takes the lowest with argmin over (refs > 0). Slots are computed as flat slot numbers like vLLM's
# slot_mapping (block * B + offset) and storage is addressed through a reshaped view.
import numpy as np

from transformer_lab import attention_core, attn_out, embed, qkv, unembed


def _integer(x, what):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{what} must be an integer")
    return int(x)


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        n_blocks, block_size = _integer(n_blocks, "n_blocks"), _integer(block_size, "block_size")
        if n_blocks <= 0 or block_size <= 0:
            raise ValueError("pool dimensions must be positive")
        self.cfg, self.n_blocks, self.block_size = cfg, n_blocks, block_size
        dims = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)
        self.k, self.v = np.zeros(dims), np.zeros(dims)
        self.refs = np.zeros(n_blocks, dtype=np.int64)
        self.n_copies = 0
        self._peak = 0

    n_used = property(lambda self: int(np.count_nonzero(self.refs)))
    n_free = property(lambda self: self.n_blocks - int(np.count_nonzero(self.refs)))
    peak_used = property(lambda self: self._peak)

    def _id(self, b, live=True):
        b = _integer(b, "block id")
        if not (0 <= b < self.n_blocks):
            raise ValueError(f"block {b} does not exist")
        if live and self.refs[b] <= 0:
            raise ValueError(f"block {b} is not allocated")
        return b

    def alloc(self):
        busy = self.refs > 0
        if busy.all():
            raise MemoryError("no free block")
        b = int(np.argmin(busy))          # first False = lowest free id
        self.refs[b] = 1
        self._peak = max(self._peak, self.n_used)
        return b

    def incref(self, b):
        self.refs[self._id(b)] += 1

    def decref(self, b):
        self.refs[self._id(b)] -= 1

    def refcount(self, b):
        return int(self.refs[self._id(b, live=False)])

    def copy_block(self, b):
        src = self._id(b)
        dst = self.alloc()
        self.k[:, dst, ...] = self.k[:, src, ...]
        self.v[:, dst, ...] = self.v[:, src, ...]
        self.n_copies += 1
        return dst


class PagedSequence:
    def __init__(self, pool):
        self.pool, self.blocks, self.length = pool, [], 0

    def _plan(self, n):
        """(copy needed?, new blocks needed) for n more tokens."""
        B = self.pool.block_size
        copy = bool(self.length % B) and self.pool.refcount(self.blocks[-1]) > 1
        return copy, max(0, -(-(self.length + n) // B) - len(self.blocks))

    def reserve(self, n):
        n = _integer(n, "n")
        if n < 1:
            raise ValueError("n must be >= 1")
        copy, new = self._plan(n)
        if copy + new > self.pool.n_free:
            raise MemoryError("pool exhausted")
        if copy:
            shared = self.blocks[-1]
            self.blocks[-1] = self.pool.copy_block(shared)
            self.pool.decref(shared)
        self.blocks.extend(self.pool.alloc() for _ in range(new))

    def _slot_ids(self, start, count):
        B = self.pool.block_size
        pos = np.arange(start, start + count)
        table = np.array(self.blocks, dtype=np.int64)
        return table[pos // B] * B + pos % B

    def _flat(self, arr, layer):
        cfg = self.pool.cfg
        return arr[layer].reshape(self.pool.n_blocks * self.pool.block_size, cfg.n_heads, cfg.d_head)

    def write(self, layer, start, k, v):
        slots = self._slot_ids(start, len(k))
        self._flat(self.pool.k, layer)[slots] = k       # reshape of a contiguous array is a view
        self._flat(self.pool.v, layer)[slots] = v

    def read(self, layer, length):
        slots = self._slot_ids(0, length)
        return self._flat(self.pool.k, layer)[slots], self._flat(self.pool.v, layer)[slots]

    def fork(self):
        twin = PagedSequence(self.pool)
        for b in self.blocks:
            self.pool.incref(b)
        twin.blocks, twin.length = self.blocks[:], self.length
        return twin

    def free(self):
        while self.blocks:
            self.pool.decref(self.blocks.pop())
        self.length = 0


def _validate(cfg, seq, chunk):
    a = np.asarray(chunk)
    if a.ndim != 1 or len(a) == 0:
        raise ValueError("chunk must be a non-empty 1-D sequence of token ids")
    if a.dtype == object:
        a = np.array([_integer(t, "token") for t in a], dtype=np.int64)
    elif a.dtype.kind not in "iu":
        raise ValueError("token ids must be integers")
    if np.any(a < 0) or np.any(a >= cfg.vocab):
        raise ValueError("token id out of range")
    if seq.length + len(a) > cfg.max_len:
        raise ValueError("max_len exceeded")
    return a.astype(np.int64)


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if len(seqs) != len(chunks):
        raise ValueError("len(seqs) != len(chunks)")
    chunks = [_validate(cfg, s, c) for s, c in zip(seqs, chunks)]
    # Per pool: new blocks, plus for every shared partial block the copies its stepping holders make;
    # each copy lowers the count, and the holder that finds count 1 writes in place.
    by_pool = {}
    for s, c in zip(seqs, chunks):
        entry = by_pool.setdefault(id(s.pool), [s.pool, 0, {}])
        copy, new = s._plan(len(c))
        entry[1] += new
        if s.length % s.pool.block_size:
            last = s.blocks[-1]
            entry[2][last] = entry[2].get(last, 0) + 1
    for pool, new, holders in by_pool.values():
        copies = sum(min(h, pool.refcount(b) - 1) for b, h in holders.items())
        if new + copies > pool.n_free:
            raise MemoryError("step needs more blocks than are free")
    for s, c in zip(seqs, chunks):
        s.reserve(len(c))
    logits = []
    for s, c in zip(seqs, chunks):
        p0 = s.length
        h = embed(params, cfg, c, p0)
        for layer in range(cfg.n_layers):
            q, k, v = qkv(params, cfg, layer, h)
            s.write(layer, p0, k, v)
            K, V = s.read(layer, p0 + len(c))
            h = attn_out(params, cfg, layer, h, attention_core(q, K, V, p0))
        s.length = p0 + len(c)
        logits.append(unembed(params, cfg, h))
    return logits


def blockwise_attention(q, seq, layer):
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("length must be >= 1")
    k_store, v_store = seq.pool.k, seq.pool.v
    scale = np.sqrt(q.shape[-1])
    logits = []
    for j in range(-(-L // B)):
        filled = min(B, L - j * B)
        logits.append(np.einsum("hd,shd->hs", q, k_store[layer, seq.blocks[j], :filled]) / scale)
    m = np.max(np.stack([x.max(axis=1) for x in logits]), axis=0)
    exps = [np.exp(x - m[:, None]) for x in logits]
    z = sum(e.sum(axis=1) for e in exps)
    out = np.zeros(q.shape)
    for j, e in enumerate(exps):
        filled = e.shape[1]
        out += np.einsum("hs,shd->hd", e / z[:, None], v_store[layer, seq.blocks[j], :filled])
    return out
