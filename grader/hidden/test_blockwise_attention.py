"""Part 3, blockwise attention, on storage and tables this suite builds itself (no allocator, no
paged_step), compared with the reference to 1e-12. Each check's core cases are the same for every
seed (inputs.core_rng: tables, queries, K/V); its last cases are drawn from the student's seed."""
from grader.hidden.inputs import ODD_BLOCK_SIZES, Case, core_rng, pick, random_config
from grader.hidden.judges import attention_judge


def cases_of(rng, n_blocks, block_size, lengths, layers):
    """Queries over random, non-monotone tables of just enough distinct blocks."""
    out = []
    for length, layer in zip(lengths, layers):
        used = -(-length // block_size)
        extra = int(rng.integers(0, 2)) if used < n_blocks else 0          # tables may hold a spare block
        table = rng.choice(n_blocks, size=min(n_blocks, used + extra), replace=False).tolist()
        out.append({"table": table, "length": int(length), "layer": int(layer), "q_seed": int(rng.integers(1 << 30))})
    return out


def attention(name, rng, cfg, n_blocks, block_size, lengths, layers):
    return Case(name, "blockwise", {"cfg": cfg, "n_blocks": n_blocks, "block_size": block_size,
                                    "seed": int(rng.integers(1 << 30)),
                                    "cases": cases_of(rng, n_blocks, block_size, lengths, layers)})


def plan_boundaries(rng):
    """Lengths k*B - 1, k*B and k*B + 1 for k = 1, 2, 3, every layer: block sizes 1, 3, 4 and 16 on every
    seed, and one drawn."""
    cases, core = [], core_rng("blockwise_attention.boundaries")
    for r, B in ((core, 1), (core, 3), (core, 4), (core, 16), (rng, pick(rng, (2, 5, 7, 9)))):
        lengths = [k * B + d for k in (1, 2, 3) for d in (-1, 0, 1) if k * B + d >= 1]
        cases.append(attention(f"block size {B}", r, None, 3 * 3 + 4 + 2, B, lengths,
                               [i % 2 for i in range(len(lengths))]))
    return cases


def plan_tables_layers(rng):
    """Non-monotone tables (random permutations of just enough blocks, sometimes a spare one), every
    layer; large scores, where a softmax needs each head's own maximum."""
    cases, core = [], core_rng("blockwise_attention.tables_layers")
    for B, lengths in ((3, [1, 5, 13, 20, 33, 2, 17, 35]), (8, [9, 70, 8, 40, 95, 1, 24, 63])):
        cases.append(attention(f"block size {B}", core, None, 16, B, lengths, [0, 1] * 4))
    large = attention("large scores (a softmax needs each head's own maximum)", core, None, 16, 5, [7, 23, 2, 29],
                      [0, 1, 1, 0])
    for c in large.inputs["cases"]:
        c["q_scale"] = float(core.uniform(8000, 10000))    # scores thousands apart: a shift by anything but the
                                                            # maximum overflows
    B = pick(rng, (4, 6, 11))
    return cases + [large, attention(f"block size {B}", rng, None, 16, B, rng.integers(1, 12 * B, 6), [0, 1] * 3)]


FIXED_CONFIGS = (
    ({"vocab": 50, "d_model": 6, "n_layers": 3, "n_heads": 1, "d_head": 2, "d_ff": 8, "max_len": 120}, 1),
    ({"vocab": 50, "d_model": 20, "n_layers": 1, "n_heads": 5, "d_head": 7, "d_ff": 30, "max_len": 150}, 24),
)


def plan_configs(rng):
    """Other Configs (one layer, one head, odd head sizes) and block sizes: two on every seed, two drawn."""
    cases, core = [], core_rng("blockwise_attention.configs")
    for i, (cfg, B) in enumerate(FIXED_CONFIGS):
        n_blocks = max(4, 200 // B)
        cases.append(attention(f"Config {i}, block size {B}", core, cfg, n_blocks, B, [1, B, B + 1, 2 * B + 3, 60],
                               [k % cfg["n_layers"] for k in range(5)]))
    for i in range(2, 4):
        cfg = random_config(rng)
        B = pick(rng, ODD_BLOCK_SIZES)
        n_blocks = max(4, 200 // B)
        lengths = rng.integers(1, min(n_blocks * B, 150), 5)
        cases.append(attention(f"Config {i}, block size {B}", rng, cfg, n_blocks, B, lengths,
                               rng.integers(0, cfg["n_layers"], 5)))
    return cases


def plan_empty(rng):
    return [Case("length 0", "blockwise", {"cfg": None, "n_blocks": 4, "block_size": 4, "seed": 1,
                                           "cases": [{"table": [], "length": 0, "layer": 0, "q_seed": 2},
                                                     {"table": [2], "length": 0, "layer": 1, "q_seed": 3}]})]


PLANS = {
    "blockwise_attention.boundaries": plan_boundaries,
    "blockwise_attention.tables_layers": plan_tables_layers,
    "blockwise_attention.configs": plan_configs,
    "blockwise_attention.empty": plan_empty,
}
JUDGES = dict.fromkeys(PLANS, attention_judge)


def test_blockwise_attention(case, judge):
    judge(case)
