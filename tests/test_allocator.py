"""Part 1: the block allocator (BlockPool).

Every script is also checked operation by operation against what the contract says each call does
to the state before it (`follows_the_rules`), and against the pool invariants."""
import numpy as np
import pytest

import scenarios as sc
from support import SMALL, equal, fail, pool_invariants, raised, where

pytestmark = pytest.mark.allocator
SECTION = "Part 1: the block allocator"


def follows_the_rules(records, n_blocks):
    """Each call did exactly what the contract says to the refcounts observed just before it:
    alloc/copy_block take the lowest block whose refcount was 0; incref/decref move one refcount
    by one; refcount reports it; a bad or free id is a ValueError, a full pool a MemoryError, and
    an error changes nothing."""
    rc, copies = [0] * n_blocks, 0
    for i, rec in enumerate(records):
        name, *args = rec["op"]
        b = args[0] if args else None
        valid = isinstance(b, (int, np.integer)) and not isinstance(b, bool) and 0 <= b < n_blocks
        free = [x for x in range(n_blocks) if rc[x] == 0]
        after, new_copies, result = list(rc), copies, None
        if name in ("incref", "decref", "copy", "refcount") and not valid:
            expected_error = f"ValueError (block id {b} is outside [0, {n_blocks}))"
        elif name in ("incref", "decref", "copy") and rc[b] == 0:
            expected_error = f"ValueError (block {b} is free)"
        elif name in ("alloc", "copy") and not free:
            expected_error = "MemoryError (no block is free)"
        else:
            expected_error = None
            if name in ("alloc", "copy"):
                result, after[free[0]] = free[0], 1
                new_copies += name == "copy"
            elif name in ("incref", "decref"):
                after[b] += 1 if name == "incref" else -1
            elif name == "refcount":
                result = rc[b]
        got_error = rec["error"]
        if expected_error is None and got_error is not None:
            fail(f"{where(records, i)}: expected it to succeed (refcounts before: {rc}), "
                 f"got {got_error['kind']}: {got_error['message']}", SECTION)
        if expected_error is not None:
            kind = expected_error.split()[0]
            if got_error is None or got_error["kind"] != kind:
                got = "no error" if got_error is None else f"{got_error['kind']}: {got_error['message']}"
                fail(f"{where(records, i)}: expected {expected_error}, got {got} (refcounts before: {rc})", SECTION)
        if result is not None:
            what = "the lowest free block" if name in ("alloc", "copy") else "its refcount"
            equal(f"{where(records, i)}: the result ({what}; refcounts before: {rc})", result, rec["result"], SECTION)
        equal(f"{where(records, i)}: refcounts (before: {rc})", after, rec["refcounts"], SECTION)
        equal(f"{where(records, i)}: n_copies", new_copies, rec["n_copies"], SECTION)
        rc, copies = after, new_copies


def script(pk, ops, n_blocks=8, block_size=4, cfg=None, fill_seed=None):
    records = sc.pool_script(pk, cfg, n_blocks, block_size, [list(op) for op in ops], fill_seed)
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


# Hand-worked: which ids the allocs of each script return (lowest free first, whatever the free order).
LOWEST_FREE = {
    "fresh pool": (4, allocs(4), [0, 1, 2, 3]),
    "lecture demo 1": (8, allocs(5) + [["decref", 0], ["decref", 2], ["decref", 4]] + allocs(3),
                       [0, 1, 2, 3, 4, 0, 2, 4]),
    "freed in another order": (8, allocs(5) + [["decref", 4], ["decref", 0], ["decref", 2]] + allocs(4),
                               [0, 1, 2, 3, 4, 0, 2, 4, 5]),
    "last freed is not first reused": (6, allocs(3) + [["decref", 1], ["decref", 2]] + allocs(2),
                                       [0, 1, 2, 1, 2]),
}


@pytest.mark.parametrize("name", LOWEST_FREE)
def test_alloc_hands_out_the_lowest_free_block(pk, name):
    n_blocks, ops, expected = LOWEST_FREE[name]
    records = script(pk, ops, n_blocks)
    got = [r["result"] for r in records if r["op"] == ["alloc"]]
    equal(f"{name}: the ids returned by alloc, in order (ops: {ops})", expected, got, SECTION)


def test_refcounts_incref_decref(pk):
    ops = allocs(2) + [["incref", 0], ["incref", 0], ["refcount", 0], ["decref", 0], ["refcount", 0],
                       ["decref", 0], ["decref", 0], ["refcount", 0], ["refcount", 1]]
    records = script(pk, ops, n_blocks=4)
    equal("results of refcount(0), refcount(0), refcount(0), refcount(1)",
          [3, 2, 0, 1], [r["result"] for r in records if r["op"][0] == "refcount"], SECTION)
    equal("n_used, n_free at the end (block 0 freed at refcount 0)", (1, 3),
          (records[-1]["n_used"], records[-1]["n_free"]), SECTION)


def test_peak_used_is_the_largest_n_used(pk):
    ops = allocs(3) + [["decref", 1], ["decref", 0], ["alloc"], ["alloc"], ["alloc"], ["decref", 2]]
    records = script(pk, ops, n_blocks=6)
    equal("peak_used after each call", [1, 2, 3, 3, 3, 3, 3, 4, 4], [r["peak_used"] for r in records], SECTION)


def test_alloc_on_a_full_pool_is_a_memory_error(pk):
    records = script(pk, allocs(3) + [["alloc"], ["decref", 1], ["alloc"]], n_blocks=3)
    raised(records, 3, "MemoryError", "every block is in use", SECTION)
    equal("alloc after freeing block 1 of a full pool", 1, records[-1]["result"], SECTION)


BAD_IDS = [("incref", -1), ("decref", 6), ("refcount", -1), ("refcount", 6), ("copy", -2), ("copy", 99),
           ("incref", 4), ("decref", 5), ("copy", 3)]


@pytest.mark.parametrize("op, b", BAD_IDS, ids=[f"{op}({b})" for op, b in BAD_IDS])
def test_bad_or_free_ids_are_value_errors(pk, op, b):
    records = script(pk, allocs(3) + [[op, b]], n_blocks=6)
    why = f"blocks 0-2 are in use, {b} is {'free' if 0 <= b < 6 else 'outside [0, 6)'}"
    raised(records, 3, "ValueError", why, SECTION)


def test_double_free_and_refcount_of_a_free_block(pk):
    records = script(pk, allocs(2) + [["decref", 0], ["decref", 0], ["refcount", 0]], n_blocks=4)
    raised(records, 3, "ValueError", "block 0 was already freed: a double free", SECTION)
    equal("refcount(0) of a free block", 0, records[4]["result"], SECTION)


def test_numpy_integer_ids_are_accepted(pk):
    ops = allocs(2) + [["incref", np.int64(1)], ["refcount", np.int32(1)], ["decref", np.int64(1)],
                       ["copy", np.int64(0)]]
    records = script(pk, ops, n_blocks=4)
    equal("refcount(np.int32(1)) after incref(np.int64(1))", 2, records[3]["result"], SECTION)


def test_copy_block_on_a_full_pool(pk):
    records = script(pk, allocs(2) + [["copy", 0], ["copy", 7], ["decref", 1], ["copy", 0]], n_blocks=2)
    raised(records, 2, "MemoryError", "no block is free for the copy", SECTION)
    raised(records, 3, "ValueError", "block 7 is outside [0, 2): a bad id is reported before a full pool", SECTION)
    equal("n_copies after one successful copy", 1, records[-1]["n_copies"], SECTION)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_operations_follow_the_rules(pk, seed):
    rng = np.random.default_rng(seed)
    names = ["alloc", "alloc", "incref", "decref", "decref", "refcount", "copy"]
    ops = [[name] if name == "alloc" else [name, int(rng.integers(-1, 7))]
           for name in rng.choice(names, size=150)]
    script(pk, ops, n_blocks=6, block_size=2, fill_seed=seed)
