"""Part 1, the block allocator, on hidden inputs: the reference's records are the expected ones.

Scripts name blocks by handle (#k: what the k-th alloc or copy_block that succeeded returned) and
free blocks as the test knows them (scenarios.pool_script), so every allocation order runs the same
script. Only allocator.lowest_free_first compares the ids alloc and copy_block return; the other
checks compare the pool with every block named by its handle (rules.pool_view). Each check's cases but
its last are the same for every seed (inputs.core_rng): a bug they catch costs the same for every
student; the last case is drawn from the student's seed."""
from scenarios import random_pool_ops

from grader.hidden.inputs import ODD_BLOCK_SIZES, Case, core_rng, pick, random_config
from grader.hidden.judges import generic_judge, lowest_free_judge, pool_judge


def script(name, n_blocks, ops, cfg=None, block_size=4):
    return Case(name, "pool_script", {"cfg": cfg, "n_blocks": n_blocks, "block_size": block_size, "ops": ops})


FIXED_CFG = {"vocab": 50, "d_model": 6, "n_layers": 3, "n_heads": 1, "d_head": 2, "d_ff": 8, "max_len": 64}


def plan_layout(rng):
    fixed = [Case("TINY, one block of 1", "pool_layout", {"cfg": None, "n_blocks": 1, "block_size": 1}),
             Case("3 layers, 1 head of 2, 17 blocks of 16", "pool_layout", {"cfg": FIXED_CFG, "n_blocks": 17,
                                                                           "block_size": 16})]
    core = core_rng("allocator.layout")
    return fixed + [Case(f"Config {i}", "pool_layout", {"cfg": cfg, "n_blocks": int(r.integers(1, 40)),
                                                         "block_size": pick(r, ODD_BLOCK_SIZES)})
                    for i, (cfg, r) in enumerate([(None, core), (random_config(core), core),
                                                  (random_config(rng), rng)], start=2)]


def plan_lowest_free_first(rng):
    """Scattered frees, then allocs that take blocks back, and at the end one copy_block: never a full
    pool, never a bad call, so these scripts judge only which free block is picked (the copy comes
    last, so that a copy_block that mistreats its source's refcount cannot change a later pick)."""
    cases, core = [], core_rng("allocator.lowest_free_first")
    for rng, n in ((core, 7), (core, 16), (rng, int(rng.integers(24, 40)))):      # core, core, drawn
        ops, live = [["alloc"]] * n, list(range(n))          # live: the handles the test holds (refcount 1)
        for last in (False, False, True):
            gone = rng.permutation(len(live))[: int(rng.integers(2, len(live) // 2 + 2))].tolist()
            ops += [["decref", live[i]] for i in gone]
            live = [h for i, h in enumerate(live) if i not in gone]
            for _ in range(int(rng.integers(1, len(gone) + (not last)))):    # the last round leaves a block free
                live.append(sum(op == ["alloc"] for op in ops))
                ops.append(["alloc"])
        cases.append(script(f"{n} blocks", n, ops + [["copy", pick(rng, live)]]))
    return cases


def plan_refcounts(rng):
    """Refcounts up to 3 and back, a block freed and handed out again, refcount of free blocks, numpy
    integer ids (the contract accepts them): the same script for every seed; then random scripts."""
    fixed = [["alloc"], ["alloc"], ["alloc"], ["incref", 1], ["incref", 1], ["refcount", 1], ["decref", 1],
             ["refcount", 1], ["decref", 0], ["refcount", "freed"], ["alloc"], ["incref", ["int64", 3]],
             ["refcount", ["int32", 3]], ["decref", ["int64", 3]], ["decref", 1], ["decref", 1], ["refcount", 1],
             ["refcount", "unused"], ["decref", 2], ["incref", ["int32", 3]], ["decref", 3], ["decref", ["int64", 3]]]
    w, core = {"alloc": 2, "incref": 3, "decref": 4, "refcount": 2}, core_rng("allocator.refcounts")
    return [script("5 blocks, the same script for every seed", 5, fixed)] + \
        [script(f"{n} blocks", n, random_pool_ops(r, n, 60, w)) for r, n in ((core, 4), (core, 9),
                                                                              (rng, int(rng.integers(10, 30))))]


def plan_peak_used(rng):
    cases, core = [], core_rng("allocator.peak_used")
    for rng, n in ((core, 6), (core, 12), (rng, int(rng.integers(16, 30)))):      # core, core, drawn
        up = int(rng.integers(2, n))
        ops = [["alloc"]] * up + [["decref", h] for h in range(up)] + [["alloc"]] * int(rng.integers(1, up + 1))
        ops += [["incref", up], ["decref", up]] + [["alloc"]] * (n - up + 1)     # #up: the first block taken back
        cases.append(script(f"{n} blocks", n, ops))
    return cases


def plan_exhaustion(rng):
    n, m = int(rng.integers(3, 9)), 5
    return [
        script("one block", 1, [["alloc"], ["alloc"], ["decref", 0], ["alloc"], ["alloc"]]),
        script(f"{m} blocks", m, [["alloc"]] * (m + 2) + [["decref", m // 2], ["alloc"], ["alloc"]]),
        script(f"{n} blocks, shared", n, [["alloc"]] * n + [["incref", 1], ["decref", 1], ["alloc"],
                                                            ["decref", 1], ["alloc"], ["alloc"]]),
    ]


def plan_bad_ids(rng):
    n, drawn = 7, int(rng.integers(4, 12))           # the first two scripts are the same for every seed
    ops = [["alloc"], ["alloc"], ["alloc"], ["decref", 1]]
    for kind in ("incref", "decref", "copy", "refcount"):
        ops += [[kind, ["id", -1]], [kind, ["id", n]], [kind, ["id", n + 5]], [kind, ["id", -n]],
                [kind, "freed"], [kind, "unused"]]
    ops += [["decref", 2], ["decref", 2], ["refcount", 2], ["incref", 0], ["decref", 0], ["decref", 0], ["decref", 0]]
    full = [["alloc"]] * n + [["copy", ["id", n]], ["copy", ["id", -1]]]
    return [script(f"{n} blocks", n, ops), script(f"{n} blocks, full pool", n, full),
            script("random bad ids", drawn, random_pool_ops(rng, drawn, 40, {"alloc": 2, "decref": 2, "bad": 3}))]


def plan_copy_block(rng):
    """copy_block's result, refcounts and n_copies (Part 1's); the data it copies is judged in Part 4,
    which owns that a copied block holds its source's K and V."""
    cases, core = [], core_rng("allocator.copy_block")
    for i, (rng, cfg) in enumerate([(core, None), (core, random_config(core)), (rng, random_config(rng))]):
        n = int(rng.integers(4, 10))
        src = int(rng.integers(0, 3))
        ops = [["alloc"], ["alloc"], ["alloc"], ["copy", src], ["incref", 3], ["copy", 3], ["decref", 1], ["copy", 0]]
        ops += [["alloc"]] * n + [["copy", 0], ["copy", ["id", n + 4]]]
        cases.append(script(f"Config {i}", n + 4, ops, cfg=cfg, block_size=pick(rng, ODD_BLOCK_SIZES[:8])))
    return cases


def plan_random_ops(rng):
    w, core = {"alloc": 4, "incref": 2, "decref": 4, "copy": 1, "refcount": 1, "bad": 1}, core_rng("allocator.random_ops")
    return [script(f"{n} blocks, {length} operations", n, random_pool_ops(r, n, length, w))
            for r, n, length in ((core, 3, 80), (core, 9, 150), (rng, int(rng.integers(14, 30)), 150))]


PLANS = {
    "allocator.layout": plan_layout,
    "allocator.lowest_free_first": plan_lowest_free_first,
    "allocator.refcounts": plan_refcounts,
    "allocator.peak_used": plan_peak_used,
    "allocator.exhaustion": plan_exhaustion,
    "allocator.bad_ids": plan_bad_ids,
    "allocator.copy_block": plan_copy_block,
    "allocator.random_ops": plan_random_ops,
}
JUDGES = {
    "allocator.layout": generic_judge,          # attributes, shape, dtype, zeros: the plain comparison
    "allocator.lowest_free_first": lowest_free_judge,
    "allocator.refcounts": pool_judge,
    "allocator.peak_used": pool_judge,
    "allocator.exhaustion": pool_judge,
    "allocator.bad_ids": pool_judge,
    "allocator.copy_block": pool_judge,
    "allocator.random_ops": pool_judge,
}


def test_allocator(case, judge):
    judge(case)
