"""Part 1: the block allocator (BlockPool).

Scripts name blocks by handle, #k = the block the k-th alloc or copy_block that succeeded returned
(from #0), so they run the same on any allocator. Every script is checked call by call against what
the contract says each call does to the pool the test knows (`follows_the_rules`) and against the
pool invariants; only the tests of the lowest free block look at which ids alloc and copy_block pick."""
import numpy as np
import pytest

import rules
import scenarios as sc
from support import SMALL, equal, fail, pool_invariants, raised, where

pytestmark = pytest.mark.allocator
SECTION = "Part 1: the block allocator"


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


def script(pk, ops, n_blocks=8, block_size=4, cfg=None):
    records = sc.pool_script(pk, cfg, n_blocks, block_size, [list(op) for op in ops])
    pool_invariants(records, n_blocks, SECTION)
    follows_the_rules(records, n_blocks)
    return records


def allocs(n):
    return [["alloc"]] * n


@pytest.mark.parametrize("cfg, n_blocks, block_size", [(None, 8, 4), (SMALL, 5, 3), (SMALL, 1, 1)],
                         ids=["TINY", "SMALL", "one-block"])
def test_new_pool_layout(pk, cfg, n_blocks, block_size):
    got = sc.pool_layout(pk, cfg, n_blocks, block_size)
    c = sc.config(cfg)
    shape = [c.n_layers, n_blocks, block_size, c.n_heads, c.d_head]
    expected = {"n_blocks": n_blocks, "block_size": block_size, "same_cfg": True,
                "k_shape": shape, "v_shape": shape, "k_dtype": "float64", "v_dtype": "float64",
                "zeros": True, "distinct": True, "refcounts": [0] * n_blocks,
                "n_used": 0, "n_free": n_blocks, "peak_used": 0, "n_copies": 0}
    for key, value in expected.items():
        note = {"k_shape": " ([n_layers, n_blocks, block_size, n_heads, d_head])",
                "distinct": " (k and v must be two separate arrays)", "zeros": " (storage starts as zeros)"}
        equal(f"BlockPool(cfg, n_blocks={n_blocks}, block_size={block_size}).{key}{note.get(key, '')}",
              value, got[key], SECTION)


# Hand-worked: which ids the allocs (and copies) of each script return, lowest free first, whatever
# order blocks were freed in. The scripts free blocks by handle: #k = what the k-th alloc returned.
LOWEST_FREE = {
    "fresh pool": (4, allocs(4), [0, 1, 2, 3]),
    "lecture demo 1": (8, allocs(5) + [["decref", 0], ["decref", 2], ["decref", 4]] + allocs(3),
                       [0, 1, 2, 3, 4, 0, 2, 4]),
    "freed in another order": (8, allocs(5) + [["decref", 4], ["decref", 0], ["decref", 2]] + allocs(4),
                               [0, 1, 2, 3, 4, 0, 2, 4, 5]),
    "last freed is not first reused": (6, allocs(3) + [["decref", 1], ["decref", 2]] + allocs(2),
                                       [0, 1, 2, 1, 2]),
    "copy_block takes the lowest free block": (6, allocs(4) + [["decref", 2], ["decref", 1], ["copy", 3]],
                                               [0, 1, 2, 3, 1]),
}


@pytest.mark.parametrize("name", LOWEST_FREE)
def test_alloc_hands_out_the_lowest_free_block(pk, name):
    n_blocks, ops, expected = LOWEST_FREE[name]
    records = script(pk, ops, n_blocks)
    got = [r["result"] for r in records if r["op"][0] in ("alloc", "copy")]
    equal(f"{name}: the ids returned by alloc and copy_block, in order (ops by handle: {ops})", expected, got,
          SECTION)


def test_refcounts_incref_decref(pk):
    ops = allocs(2) + [["incref", 0], ["incref", 0], ["refcount", 0], ["decref", 0], ["refcount", 0],
                       ["decref", 0], ["decref", 0], ["refcount", 0], ["refcount", 1]]
    records = script(pk, ops, n_blocks=4)
    equal("results of refcount(#0), refcount(#0), refcount(#0), refcount(#1)",
          [3, 2, 0, 1], [r["result"] for r in records if r["op"][0] == "refcount"], SECTION)
    equal("n_used, n_free at the end (#0's block freed at refcount 0)", (1, 3),
          (records[-1]["n_used"], records[-1]["n_free"]), SECTION)


def test_peak_used_is_the_largest_n_used(pk):
    ops = allocs(3) + [["decref", 1], ["decref", 0], ["alloc"], ["alloc"], ["alloc"], ["decref", 2]]
    records = script(pk, ops, n_blocks=6)
    equal("peak_used after each call", [1, 2, 3, 3, 3, 3, 3, 4, 4], [r["peak_used"] for r in records], SECTION)


def test_alloc_on_a_full_pool_is_a_memory_error(pk):
    records = script(pk, allocs(3) + [["alloc"], ["decref", 1], ["alloc"]], n_blocks=3)
    raised(records, 3, "MemoryError", "every block is in use", SECTION)
    equal("alloc after decref(#1) on a full pool (#1's block is the only free one)", records[1]["result"],
          records[-1]["result"], SECTION)


BAD_IDS = [("incref", ["id", -1]), ("decref", ["id", 6]), ("refcount", ["id", -1]), ("refcount", ["id", 6]),
           ("copy", ["id", -2]), ("copy", ["id", 99]), ("incref", "unused"), ("decref", "unused"), ("copy", "unused"),
           ("incref", "freed"), ("decref", "freed"), ("copy", "freed")]


@pytest.mark.parametrize("op, b", BAD_IDS, ids=[f"{op}({b[1] if isinstance(b, list) else b})" for op, b in BAD_IDS])
def test_bad_or_free_ids_are_value_errors(pk, op, b):
    records = script(pk, allocs(4) + [["decref", 3], [op, b]], n_blocks=6)
    what = f"{b[1]} is outside [0, 6)" if isinstance(b, list) else \
        {"unused": "a block no alloc has returned is free", "freed": "#3's block was given back: it is free"}[b]
    raised(records, 5, "ValueError", f"#0-#2 are in use; {what}", SECTION)


def test_double_free_and_refcount_of_a_free_block(pk):
    records = script(pk, allocs(2) + [["decref", 0], ["decref", 0], ["refcount", 0]], n_blocks=4)
    raised(records, 3, "ValueError", "#0's block was already freed: a double free", SECTION)
    equal("refcount(#0) of a free block", 0, records[4]["result"], SECTION)


def test_numpy_integer_ids_are_accepted(pk):
    ops = allocs(2) + [["incref", ["int64", 1]], ["refcount", ["int32", 1]], ["decref", ["int64", 1]],
                       ["copy", ["int64", 0]]]
    records = script(pk, ops, n_blocks=4)
    equal("refcount(np.int32(#1)) after incref(np.int64(#1))", 2, records[3]["result"], SECTION)


def test_copy_block_on_a_full_pool(pk):
    records = script(pk, allocs(2) + [["copy", 0], ["copy", ["id", 7]], ["decref", 1], ["copy", 0]], n_blocks=2)
    raised(records, 2, "MemoryError", "no block is free for the copy", SECTION)
    raised(records, 3, "ValueError", "block 7 is outside [0, 2): a bad id is reported before a full pool", SECTION)
    equal("n_copies after one successful copy", 1, records[-1]["n_copies"], SECTION)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_operations_follow_the_rules(pk, seed):
    weights = {"alloc": 2, "incref": 1, "decref": 2, "refcount": 1, "copy": 1, "bad": 1}
    script(pk, sc.random_pool_ops(np.random.default_rng(seed), 6, 150, weights), n_blocks=6, block_size=2)
