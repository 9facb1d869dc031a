"""The grader's own book of references, put in front of a submission's pool whose incref, decref,
refcount or n_free do not do what the contract says (scenarios.refcount_probe, capacity_probe), so
that Parts 2, 4 and 5, which are judged through those calls (fork increfs, free decrefs, copy-on-write
reads refcount, a step counts on n_free, the drivers count n_used), are not charged for Part 1's bug.

It keeps only what those probes found broken: the references, n_used, n_free, peak_used and
n_copies (it also stands in when copy_block moves references it should not: copy_probe). The ids
(alloc, as far as it works), the storage (k, v) and the copy (copy_block: its K/V) stay the
submission's own; where the submission's copy_block moves references (it would free, in the pool's
own book, a block the ledger holds, and hand it out again), refuses a block the ledger holds or
hands out one still held, the ledger copies the block itself (the contract's copy: a free block, the
source's K and V), so a copy_block bug, Part 1's, costs Parts 2, 4 and 5 nothing. It frees a block in the submission's
pool (its decref, refcount 1 there: no other call reached it) only when the last reference goes.
Where the pool's own alloc fails while the ledger has blocks free (MemoryError too early: a block
its decref refused, one it never hands out; an id that is not one, or one still held; an error),
the ledger hands out its lowest free block itself, as the contract's pool would.

Whether it stands in is decided in the submission's process, from probes the submission could fake:
that buys nothing, as it is a correct pool's book, and Parts 2, 4 and 5 are judged through it as
strictly as through a working pool (strategic.py's pairs whose sacrifice brings it: losses add up).

This file is sent as source text with the Part 2, 4 and 5 calls only (conftest), so it never reaches
Part 1's calls; scenarios.working_pool builds it there. It is self-contained for that reason.
"""
import numbers


class Ledger:
    def __init__(self, pool, cfg, n_blocks, block_size, own_copies=False):
        self._pool, self.cfg, self.n_blocks, self.block_size = pool, cfg, n_blocks, block_size
        self.own_copies = own_copies        # the pool's copy_block moves references: the ledger copies itself
        self._ref = [0] * n_blocks
        self.n_copies, self.peak_used = 0, 0

    def __getattr__(self, name):
        """What the ledger does not keep is the submission's pool's own (its internals, if its code reads them)."""
        if name == "_pool":
            raise AttributeError(name)
        return getattr(self._pool, name)

    # the submission's storage, whatever working_pool left there
    @property
    def k(self):
        return self._pool.k

    @k.setter
    def k(self, value):
        self._pool.k = value

    @property
    def v(self):
        return self._pool.v

    @v.setter
    def v(self, value):
        self._pool.v = value

    @property
    def n_used(self):
        return sum(1 for r in self._ref if r > 0)

    @property
    def n_free(self):
        return self.n_blocks - self.n_used

    def _id(self, b):
        if not isinstance(b, numbers.Integral) or isinstance(b, bool):
            raise ValueError(f"block id {b!r} is not an integer")
        b = int(b)
        if not 0 <= b < self.n_blocks:
            raise ValueError(f"block id {b} is outside [0, {self.n_blocks})")
        return b

    def _in_use(self, b):
        b = self._id(b)
        if self._ref[b] == 0:
            raise ValueError(f"block {b} is free")
        return b

    def _taken(self, b):
        """Count a block the submission's pool handed out (alloc or copy_block) as one reference."""
        b = self._id(b)
        self._ref[b] += 1
        self.peak_used = max(self.peak_used, self.n_used)
        return b

    def alloc(self):
        try:
            b = self._id(self._pool.alloc())
            if self._ref[b] == 0:
                return self._taken(b)
        except Exception:  # noqa: BLE001  (MemoryError too early, or any bug of the pool's own alloc)
            pass
        free = [b for b, r in enumerate(self._ref) if r == 0]
        if not free:
            raise MemoryError(f"all {self.n_blocks} blocks are in use")
        return self._taken(free[0])

    def incref(self, b):
        self._ref[self._in_use(b)] += 1

    def decref(self, b):
        b = self._in_use(b)
        self._ref[b] -= 1
        if self._ref[b] == 0:
            try:
                self._pool.decref(b)
            except Exception:  # noqa: BLE001  (the submission's own decref is what is broken: alloc copes)
                pass

    def refcount(self, b):
        return self._ref[self._id(b)]

    def copy_block(self, b):
        b = self._in_use(b)
        fresh = False
        if not self.own_copies:
            try:
                new = self._pool.copy_block(b)
                self._id(new)
                fresh = self._ref[int(new)] == 0
            except NotImplementedError:
                raise
            except Exception:  # noqa: BLE001  (its own references broken, the pool refuses a block the ledger holds)
                pass
        if not fresh:       # the contract's copy, done here: a free block, the source's K and V in every layer
            new = self.alloc()
            self._pool.k[:, new] = self._pool.k[:, b]
            self._pool.v[:, new] = self._pool.v[:, b]
        else:
            new = self._taken(new)
        self.n_copies += 1
        return new
