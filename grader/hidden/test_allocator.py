"""Part 1, the block allocator, on hidden inputs: the reference's records are the expected ones."""
from grader.hidden.inputs import ODD_BLOCK_SIZES, Case, pick, pool_ops, random_config
from grader.hidden.judges import script_judge


def script(name, n_blocks, ops, cfg=None, block_size=4, fill_seed=None):
    return Case(name, "pool_script", {"cfg": cfg, "n_blocks": n_blocks, "block_size": block_size,
                                      "ops": ops, "fill_seed": fill_seed})


def plan_layout(rng):
    return [Case(f"Config {i}", "pool_layout", {"cfg": cfg, "n_blocks": int(rng.integers(1, 40)),
                                                 "block_size": pick(rng, ODD_BLOCK_SIZES)})
            for i, cfg in enumerate([None] + [random_config(rng) for _ in range(3)])]


def plan_lowest_free_first(rng):
    cases = []
    for n in (int(rng.integers(5, 9)), int(rng.integers(12, 20)), int(rng.integers(24, 40))):
        ops = [["alloc"]] * n
        for _ in range(3):                          # free a scattered subset, then allocate some back
            order = rng.permutation(n)[: int(rng.integers(2, n // 2 + 2))].tolist()
            ops += [["decref", b] for b in order] + [["alloc"]] * int(rng.integers(1, len(order) + 1))
            ops += [["alloc"]] * n                    # refill (the surplus raises MemoryError)
        cases.append(script(f"{n} blocks", n, ops))
    return cases


def plan_refcounts(rng):
    w = {"alloc": 2, "incref": 3, "decref": 4, "refcount": 2}
    return [script(f"{n} blocks", n, pool_ops(rng, n, 60, w)) for n in (4, 9, int(rng.integers(10, 30)))]


def plan_peak_used(rng):
    cases = []
    for n in (6, int(rng.integers(8, 16)), int(rng.integers(16, 30))):
        up = int(rng.integers(2, n))
        ops = [["alloc"]] * up + [["decref", b] for b in range(up)] + [["alloc"]] * int(rng.integers(1, up + 1))
        ops += [["incref", 0], ["decref", 0]] + [["alloc"]] * (n - up + 1)
        cases.append(script(f"{n} blocks", n, ops))
    return cases


def plan_exhaustion(rng):
    n = int(rng.integers(3, 9))
    return [
        script("one block", 1, [["alloc"], ["alloc"], ["decref", 0], ["alloc"], ["alloc"]]),
        script(f"{n} blocks", n, [["alloc"]] * (n + 2) + [["decref", n // 2], ["alloc"], ["alloc"]]),
        script(f"{n} blocks, shared", n, [["alloc"]] * n + [["incref", 1], ["decref", 1], ["alloc"],
                                                            ["decref", 1], ["alloc"], ["alloc"]]),
    ]


def plan_bad_ids(rng):
    n = int(rng.integers(4, 12))
    ops = [["alloc"], ["alloc"], ["alloc"], ["decref", 1]]
    for kind in ("incref", "decref", "copy", "refcount"):
        ops += [[kind, -1], [kind, n], [kind, n + 5], [kind, -n]]
    ops += [["incref", 1], ["decref", 1], ["copy", 1], ["refcount", 1], ["decref", 2], ["decref", 2],
            ["refcount", 2], ["incref", 0], ["decref", 0], ["decref", 0], ["decref", 0]]
    full = [["alloc"]] * n + [["copy", n], ["copy", -1]]
    return [script(f"{n} blocks", n, ops), script(f"{n} blocks, full pool", n, full),
            script("random bad ids", n, pool_ops(rng, n, 40, {"alloc": 2, "decref": 2, "bad": 3}))]


def plan_copy_block(rng):
    """copy_block's ids, refcounts and n_copies (Part 1's); the data it copies is judged in Part 4,
    which owns that a copied block holds its source's K and V."""
    cases = []
    for i, cfg in enumerate([None, random_config(rng), random_config(rng)]):
        n = int(rng.integers(4, 10))
        src = int(rng.integers(0, 3))
        ops = [["alloc"], ["alloc"], ["alloc"], ["copy", src], ["incref", 3], ["copy", 3], ["decref", 1], ["copy", 0]]
        ops += [["alloc"]] * n + [["copy", 0], ["copy", n + 4]]
        cases.append(script(f"Config {i}", n + 4, ops, cfg=cfg, block_size=pick(rng, ODD_BLOCK_SIZES[:8])))
    return cases


def plan_random_ops(rng):
    w = {"alloc": 4, "incref": 2, "decref": 4, "copy": 1, "refcount": 1, "bad": 1}
    return [script(f"{n} blocks, {length} operations", n, pool_ops(rng, n, length, w))
            for n, length in ((3, 80), (int(rng.integers(6, 14)), 150), (int(rng.integers(14, 30)), 150))]


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
JUDGES = {check: script_judge for check in PLANS if check != "allocator.layout"}


def test_allocator(case, judge):
    judge(case)
