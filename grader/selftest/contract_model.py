"""One model of the contract's bookkeeping, for the selftest side only (the public tests and the
hidden suites keep their own code): checks/test_reference proves the reference against it, and
verify_corpus's differential runs hold every variant to it as well as to the reference. It is written
from the contract, not from solution/paged_kv.py: a sorted free list and refcounts for the allocator,
whole-prefix keys and a recency list for the prefix cache; eviction_order() is the one probe of an
implementation's recency that both need."""
import bisect
import copy


class Model:
    """Independent model of the allocator: sorted free list (lowest first), refcounts, block tables,
    copy-on-write in reserve. A step runs on a copy and is kept only if it did not run out."""

    def __init__(self, n_blocks, block_size):
        self.bs, self.free, self.ref = block_size, list(range(n_blocks)), [0] * n_blocks
        self.tables, self.lengths, self.copies, self.peak = {}, {}, 0, 0

    def alloc(self):
        if not self.free:
            raise MemoryError("model: pool exhausted")
        b = self.free.pop(0)
        self.ref[b] = 1
        self.peak = max(self.peak, sum(r > 0 for r in self.ref))
        return b

    def decref(self, b):
        self.ref[b] -= 1
        if self.ref[b] == 0:
            bisect.insort(self.free, b)

    def new(self, key):
        self.tables[key], self.lengths[key] = [], 0

    def fork(self, key, child):
        for b in self.tables[key]:
            self.ref[b] += 1
        self.tables[child], self.lengths[child] = list(self.tables[key]), self.lengths[key]

    def free_seq(self, key):
        for b in self.tables[key]:
            self.decref(b)
        self.new(key)

    def _reserve(self, key, n):
        t, length = self.tables[key], self.lengths[key]
        if length % self.bs and self.ref[t[-1]] > 1:
            new = self.alloc()
            self.decref(t[-1])
            t[-1] = new
            self.copies += 1
        while len(t) * self.bs < length + n:
            t.append(self.alloc())

    def step(self, items):
        """items: [(key, n_tokens)] in order; MemoryError leaves the model unchanged."""
        trial = copy.copy(self)         # the state is flat lists and dicts of lists: copy those only
        trial.free, trial.ref, trial.lengths = list(self.free), list(self.ref), dict(self.lengths)
        trial.tables = {k: list(t) for k, t in self.tables.items()}
        for key, n in items:
            trial._reserve(key, n)
        for key, n in items:
            trial.lengths[key] += n
        self.__dict__.update(trial.__dict__)


class CacheModel:
    """Independent model of the prefix cache: whole-prefix keys, a recency list (oldest first)."""

    def __init__(self, bs):
        self.bs, self.block, self.order, self.hit_tokens = bs, {}, [], 0

    def keys(self, tokens):
        t = [int(x) for x in tokens]
        return [tuple(t[:(i + 1) * self.bs]) for i in range(len(t) // self.bs)]

    def lookup(self, tokens):
        hits = []
        for key in self.keys(tokens)[:max(0, (len(tokens) - 1) // self.bs)]:
            if key not in self.block:
                break
            hits.append(self.block[key])
        return hits

    def insert(self, tokens, blocks):
        keys = self.keys(tokens)
        for key, b in zip(keys, blocks):
            if key not in self.block and b not in self.block.values():
                self.block[key] = b
                self.order.append(b)
        for key in reversed(keys):
            if key in self.block:
                self.order.remove(self.block[key])
                self.order.append(self.block[key])

    def request(self, tokens, n_free, holders):
        """A cached prefill of `tokens` with n_free free blocks and holders[b] sequences holding block b:
        (hits, blocks evicted for the shortfall), or MemoryError with nothing changed. The hits are
        held by the new request first, so they are never evicted for it; insert() follows."""
        hits = self.lookup(tokens)
        need = -(-len(tokens) // self.bs) - len(hits)
        held = list(holders)
        for b in hits:
            held[b] += 1
        if need > n_free + sum(1 for b in self.order if held[b] == 0):
            raise MemoryError("model: not enough blocks even after evicting")
        victims = self.evict(max(0, need - n_free), held)
        self.hit_tokens += len(hits) * self.bs
        return hits, victims

    def evict(self, n, holders):
        victims = [b for b in self.order if holders[b] == 0][:n]
        for b in victims:
            self.order.remove(b)
            del self.block[next(k for k, v in self.block.items() if v == b)]
        return victims


def eviction_order(pool, cache):
    """Evict one block at a time until nothing more goes: the ids released, in order (seen as the
    block whose refcount drops from 1 to 0)."""
    order = []
    while True:
        before = [pool.refcount(b) for b in range(pool.n_blocks)]
        n = cache.evict(1)
        gone = [b for b in range(pool.n_blocks) if before[b] == 1 and pool.refcount(b) == 0]
        changed = [b for b in range(pool.n_blocks) if before[b] != pool.refcount(b)]
        assert changed == gone and len(gone) == n, f"evict(1) returned {n}, refcounts changed at {changed}"
        if n == 0:
            return order
        order += gone
