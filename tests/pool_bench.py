"""Part 1's test bench: your BlockPool, called directly, every call checked against the contract.

Blocks are named by handle: #k is the block the k-th alloc or copy_block that succeeded returned
(from #0), so a story runs the same whatever ids your allocator picks. After every call the bench
checks that it did exactly what the contract says on the pool as the test knows it (`follows_the_rules`)
and the pool's invariants (n_used + n_free, peak_used). Only the lowest-free-block tests look at ids.
"""
import rules
import scenarios as sc
from support import fail, pool_invariants, raised, where

SECTION = "Part 1: the block allocator"
FREED, UNUSED = "freed", "unused"       # a block the test gave back / a block no call has returned yet


def outside(b):
    """The id b itself, not a handle (for ids outside the pool)."""
    return ["id", b]


def as_numpy(dtype, handle):
    """Handle `handle` passed as np.int64 or np.int32 ("int64", "int32")."""
    return [dtype, handle]


class PoolBench:
    """BlockPool(cfg, n_blocks, block_size); each method is the pool's call on a block named by handle
    (or FREED, UNUSED, outside(b), as_numpy(...)) and returns what it returned (None if it raised)."""

    def __init__(self, pk, n_blocks=8, block_size=4, cfg=None):
        self.n_blocks, self.run = n_blocks, sc.PoolRun(pk, cfg, n_blocks, block_size)

    @property
    def records(self):
        return self.run.records

    def alloc(self, n=1):
        """n allocs; the last one's result."""
        for _ in range(n):
            result = self._call(["alloc"])
        return result

    def incref(self, block):
        return self._call(["incref", block])

    def decref(self, block):
        return self._call(["decref", block])

    def refcount(self, block):
        return self._call(["refcount", block])

    def copy_block(self, block):
        return self._call(["copy", block])

    def handed_out(self):
        """The ids alloc and copy_block returned, in order."""
        return [r["result"] for r in self.records if r["op"][0] in ("alloc", "copy") and r["error"] is None]

    def state(self):
        """The pool's counters now: n_used, n_free, peak_used, n_copies."""
        return {k: self.records[-1][k] for k in ("n_used", "n_free", "peak_used", "n_copies")}

    def last_raised(self, kind, why):
        """The last call raised `kind` ("ValueError", "MemoryError") and changed nothing."""
        raised(self.records, len(self.records) - 1, kind, why, SECTION)

    def replay(self, ops):
        """A script of calls in scenarios.pool_script's form (random_pool_ops draws them), checked at the end."""
        for op in ops:
            self.run.call(op)
        self.check()

    def check(self):
        pool_invariants(self.records, self.n_blocks, SECTION)
        follows_the_rules(self.records, self.n_blocks)

    def _call(self, op):
        rec = self.run.call(op)
        self.check()
        return rec["result"]


def follows_the_rules(records, n_blocks):
    """Each call did exactly what the contract says, on the pool as the test knows it (scenarios.PoolBook:
    the references it holds on each block, every block named by its handle): alloc and copy_block
    hand out a block the test holds no reference on; incref and decref move one refcount by one;
    refcount reports it; a bad or free id is a ValueError, a full pool a MemoryError, and a call that
    raised changes nothing. Which free block is handed out is left to the lowest-free-block tests."""
    try:
        view = rules.pool_view(records, n_blocks)
    except ValueError as e:
        fail(f"the pool's state could not be read: {e} (are refcount(), n_used, n_free, peak_used and n_copies "
             "integers?)", SECTION)
    book, copies, peak = sc.PoolBook(n_blocks), 0, 0
    for i, (rec, row) in enumerate(zip(records, view)):
        name, b = rec["op"][0], rec["block"]
        if name != "alloc" and not book.valid(b):
            error, why = "ValueError", f"block id {b} is outside [0, {n_blocks})"
        elif name in ("incref", "decref", "copy") and not book.holds(b):
            error, why = "ValueError", f"block {b} is free"
        elif name in ("alloc", "copy") and book.n_held() == n_blocks:
            error, why = "MemoryError", "no block is free"
        else:
            error, why = None, ""
        expected = {"error": error, "result": None}
        if error is None and name in ("alloc", "copy"):
            expected["result"] = f"#{len(book.handles)}, a free block"
        elif error is None and name == "refcount":
            expected["result"] = book.refs.get(b, 0)
        if error is not None and i > 0:
            expected["changed"] = []
        if row["error"] == error and (error is not None or row["result"] == expected["result"]):
            book.note(name, b, rec["result"], rec["error"])         # it went as the contract says: account for it
        copies += name == "copy" and error is None
        peak = max(peak, book.n_held())
        expected.update(refcounts=book.by_handle([book.refs.get(x, 0) for x in range(n_blocks)]), unallocated=[],
                        n_used=book.n_held(), n_free=n_blocks - book.n_held(), peak_used=peak, n_copies=copies)
        wrong = rules.pool_difference(expected, row)
        if wrong:
            fail(f"{where(records, i)}{f' (your block {b})' if book.valid(b) and rec['op'][1:] else ''}: {wrong}"
                 + (f" ({why})" if why and row["error"] != error else "")
                 + f"\n  (#k is the block the k-th alloc or copy_block that succeeded returned; yours: "
                 f"{rules.handle_ids(records[:i + 1], n_blocks)})", SECTION)
