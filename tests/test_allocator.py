"""Part 1: the block allocator (BlockPool).

Each test is a short story on your own BlockPool, through a PoolBench (pool_bench.py): it names
blocks by handle, #k = the block the k-th alloc or copy_block that succeeded returned (from #0), so a
story runs the same on any allocator, and after every call it checks what the contract says the call
does to the pool the test knows, and the pool's invariants. Only the tests of the lowest free block
look at which ids alloc and copy_block pick."""
import numpy as np
import pytest

import scenarios as sc
from pool_bench import FREED, SECTION, UNUSED, PoolBench, as_numpy, outside
from support import SMALL, equal

pytestmark = pytest.mark.allocator


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
    note = {"k_shape": " ([n_layers, n_blocks, block_size, n_heads, d_head])",
            "distinct": " (k and v must be two separate arrays)", "zeros": " (storage starts as zeros)"}
    for key, value in expected.items():
        equal(f"BlockPool(cfg, n_blocks={n_blocks}, block_size={block_size}).{key}{note.get(key, '')}",
              value, got[key], SECTION)


def fresh_pool(pool):
    pool.alloc(4)


def lecture_demo_1(pool):
    pool.alloc(5)
    for h in (0, 2, 4):
        pool.decref(h)
    pool.alloc(3)


def freed_in_another_order(pool):
    pool.alloc(5)
    for h in (4, 0, 2):
        pool.decref(h)
    pool.alloc(4)


def last_freed_is_not_first_reused(pool):
    pool.alloc(3)
    pool.decref(1)
    pool.decref(2)
    pool.alloc(2)


def copy_block_takes_the_lowest_free_block(pool):
    pool.alloc(4)
    pool.decref(2)
    pool.decref(1)
    pool.copy_block(3)


# Hand-worked: the ids the allocs (and copies) of each story return, lowest free first, whatever
# order blocks were freed in.
LOWEST_FREE = {
    "fresh pool": (fresh_pool, 4, [0, 1, 2, 3]),
    "lecture demo 1": (lecture_demo_1, 8, [0, 1, 2, 3, 4, 0, 2, 4]),
    "freed in another order": (freed_in_another_order, 8, [0, 1, 2, 3, 4, 0, 2, 4, 5]),
    "last freed is not first reused": (last_freed_is_not_first_reused, 6, [0, 1, 2, 1, 2]),
    "copy_block takes the lowest free block": (copy_block_takes_the_lowest_free_block, 6, [0, 1, 2, 3, 1]),
}


@pytest.mark.parametrize("name", LOWEST_FREE)
def test_alloc_hands_out_the_lowest_free_block(pk, name):
    story, n_blocks, expected = LOWEST_FREE[name]
    pool = PoolBench(pk, n_blocks)
    story(pool)
    equal(f"{name}: the ids returned by alloc and copy_block, in order (the story: {story.__name__} above)",
          expected, pool.handed_out(), SECTION)


def test_refcounts_incref_decref(pk):
    pool = PoolBench(pk, n_blocks=4)
    pool.alloc(2)
    pool.incref(0)
    pool.incref(0)
    after_two_increfs = pool.refcount(0)
    pool.decref(0)
    after_one_decref = pool.refcount(0)
    pool.decref(0)
    pool.decref(0)
    equal("refcount(#0) after 2 increfs, after 1 decref, after 3 decrefs; refcount(#1)", [3, 2, 0, 1],
          [after_two_increfs, after_one_decref, pool.refcount(0), pool.refcount(1)], SECTION)
    equal("n_used, n_free at the end (#0's block freed at refcount 0)", (1, 3),
          (pool.state()["n_used"], pool.state()["n_free"]), SECTION)


def test_peak_used_is_the_largest_n_used(pk):
    pool = PoolBench(pk, n_blocks=6)
    pool.alloc(3)
    pool.decref(1)
    pool.decref(0)
    pool.alloc(3)
    pool.decref(2)
    equal("peak_used after each call", [1, 2, 3, 3, 3, 3, 3, 4, 4], [r["peak_used"] for r in pool.records], SECTION)


def test_alloc_on_a_full_pool_is_a_memory_error(pk):
    pool = PoolBench(pk, n_blocks=3)
    pool.alloc(3)
    pool.alloc()
    pool.last_raised("MemoryError", "every block is in use")
    pool.decref(1)
    equal("alloc after decref(#1) on a full pool (#1's block is the only free one)", pool.handed_out()[1],
          pool.alloc(), SECTION)


BAD_IDS = [("incref", outside(-1)), ("decref", outside(6)), ("refcount", outside(-1)), ("refcount", outside(6)),
           ("copy_block", outside(-2)), ("copy_block", outside(99)), ("incref", UNUSED), ("decref", UNUSED),
           ("copy_block", UNUSED), ("incref", FREED), ("decref", FREED), ("copy_block", FREED)]
WHY = {UNUSED: "a block no alloc has returned is free", FREED: "#3's block was given back: it is free"}


@pytest.mark.parametrize("call, block", BAD_IDS,
                         ids=[f"{c.replace('_block', '')}({b[1] if isinstance(b, list) else b})" for c, b in BAD_IDS])
def test_bad_or_free_ids_are_value_errors(pk, call, block):
    pool = PoolBench(pk, n_blocks=6)
    pool.alloc(4)
    pool.decref(3)
    getattr(pool, call)(block)
    what = f"{block[1]} is outside [0, 6)" if isinstance(block, list) else WHY[block]
    pool.last_raised("ValueError", f"#0-#2 are in use; {what}")


def test_double_free_and_refcount_of_a_free_block(pk):
    pool = PoolBench(pk, n_blocks=4)
    pool.alloc(2)
    pool.decref(0)
    pool.decref(0)
    pool.last_raised("ValueError", "#0's block was already freed: a double free")
    equal("refcount(#0) of a free block", 0, pool.refcount(0), SECTION)


def test_numpy_integer_ids_are_accepted(pk):
    pool = PoolBench(pk, n_blocks=4)
    pool.alloc(2)
    pool.incref(as_numpy("int64", 1))
    equal("refcount(np.int32(#1)) after incref(np.int64(#1))", 2, pool.refcount(as_numpy("int32", 1)), SECTION)
    pool.decref(as_numpy("int64", 1))
    pool.copy_block(as_numpy("int64", 0))


def test_copy_block_on_a_full_pool(pk):
    pool = PoolBench(pk, n_blocks=2)
    pool.alloc(2)
    pool.copy_block(0)
    pool.last_raised("MemoryError", "no block is free for the copy")
    pool.copy_block(outside(7))
    pool.last_raised("ValueError", "block 7 is outside [0, 2): a bad id is reported before a full pool")
    pool.decref(1)
    pool.copy_block(0)
    equal("n_copies after one successful copy", 1, pool.state()["n_copies"], SECTION)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_operations_follow_the_rules(pk, seed):
    weights = {"alloc": 2, "incref": 1, "decref": 2, "refcount": 1, "copy": 1, "bad": 1}
    PoolBench(pk, n_blocks=6, block_size=2).replay(sc.random_pool_ops(np.random.default_rng(seed), 6, 150, weights))
