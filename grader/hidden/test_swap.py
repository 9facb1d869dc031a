"""Part 6 (bonus), the swap space, on hidden inputs. Groups of sequences the test builds itself (their
blocks taken with pool.alloc and shared with pool.incref, their K/V stored by the test: no paged_step,
no fork), swapped out and in through one SwapSpace (scenarios.swap_script). Judged on what Part 6 owns
(rules.part6_view): every table up to renaming, lengths, the references that are not the tables' or
the test's, the space's n_free, n_out and n_in, what swap_in returns (the order pool.alloc handed its
blocks out in, named by their first appearance) and the K/V read back through the new tables, errors
and all-or-nothing. Which CPU block holds what is never looked at. Every check's cases but its last
are the same for every seed (inputs.core_rng: block sizes, groups, sharing, K/V); the last is drawn.
"""
from explain import outcome, their
from rules import describe_swap_actions, kv_difference, part6_view

from grader.hidden.compare import first_mismatch
from grader.hidden.inputs import Case, core_rng, pick, random_config
from grader.hidden.judges import generic_judge, naming_part2


def swap_case(name, actions, block_size, n_blocks=24, cpu_blocks=12, cfg=None):
    return Case(name, "swap_script", {"cfg": cfg, "n_blocks": n_blocks, "block_size": block_size,
                                      "cpu_blocks": cpu_blocks, "actions": actions})


def seed(rng):
    return int(rng.integers(1 << 30))


def forks(rng, B, n=3):
    """seq 0 of a full block and a partly filled one (two full ones for B = 1), and n - 1 forks of it."""
    return [["seq", B + max(1, B // 2), seed(rng)]] + [["fork", 0]] * (n - 1)


def beams(rng, B):
    """Four beams of one prompt (seq 0, 3 full blocks): seq 1 shares its first 2 blocks, seq 2 its 3,
    seq 3 seq 1's first 3 (two of them seq 0's): 7 distinct blocks under 15 table entries."""
    return [["seq", 3 * B, seed(rng)], ["branch", 0, 2, B + 1, seed(rng)], ["branch", 0, 3, 2, seed(rng)],
            ["branch", 1, 3, 1, seed(rng)]]


def tree(rng, B, n):
    """n sequences, each new, a fork or a branch of an earlier one (drawn)."""
    actions, lengths = [["seq", int(rng.integers(1, 4 * B)), seed(rng)]], []
    lengths.append(actions[0][1])
    for _ in range(n - 1):
        s, roll = int(rng.integers(len(lengths))), rng.random()
        full = lengths[s] // B
        if roll < 0.3:
            actions.append(["fork", s])
            lengths.append(lengths[s])
        elif roll < 0.75 and full:
            k, extra = int(rng.integers(1, full + 1)), int(rng.integers(1, 2 * B + 1))
            actions.append(["branch", s, k, extra, seed(rng)])
            lengths.append(k * B + extra)
        else:
            actions.append(["seq", int(rng.integers(1, 3 * B)), seed(rng)])
            lengths.append(actions[-1][1])
    return actions


def groups(rng, n):
    """The n sequences cut into 2 or 3 groups (in a drawn order within each)."""
    order = [int(i) for i in rng.permutation(n)]
    cut = sorted(int(c) for c in rng.choice(range(1, n), size=min(2, n - 1), replace=False))
    return [g for g in (order[:cut[0]], order[cut[0]:cut[-1]], order[cut[-1]:]) if g]


# ------------------------------------------------------------------------------------ the plans
def plan_layout(rng):
    odd = {"vocab": 61, "d_model": 24, "n_layers": 3, "n_heads": 3, "d_head": 8, "d_ff": 40, "max_len": 48}
    return [swap_case("TINY, block size 4, 8 CPU blocks", [], 4, cpu_blocks=8),
            swap_case("3 layers, 3 heads of 8, block size 5, 3 CPU blocks", [], 5, n_blocks=6, cpu_blocks=3, cfg=odd),
            swap_case("one CPU block, block size 1", [], 1, n_blocks=2, cpu_blocks=1),
            swap_case("a drawn Config", [], pick(rng, (2, 3, 6, 7)), n_blocks=int(rng.integers(4, 30)),
                      cpu_blocks=int(rng.integers(1, 16)), cfg=random_config(rng))]


def plan_swap_out(rng):
    core = core_rng("swap.swap_out")
    cases = [
        swap_case("one sequence, then another, block size 4",
                  [["seq", 9, seed(core)], ["seq", 5, seed(core)], ["swap_out", [0]], ["swap_out", [1]]], 4),
        swap_case("three forks sharing a partly filled block, a fourth outside the group, block size 3",
                  [*forks(core, 3), ["fork", 0], ["swap_out", [0, 1, 2]], ["free", 3]], 3),
        swap_case("beams, their prompt outside the group, block size 2",
                  [*beams(core, 2), ["swap_out", [1, 2, 3]], ["swap_out", [0]]], 2),
        swap_case("two groups sharing blocks across them, block size 1",
                  [["seq", 3, seed(core)], ["branch", 0, 2, 2, seed(core)], ["fork", 1], ["seq", 2, seed(core)],
                   ["swap_out", [2, 0]], ["swap_out", [3, 1]]], 1),
    ]
    B = pick(rng, (2, 5, 6, 8))
    actions = tree(rng, B, 6)
    cases.append(swap_case(f"a drawn tree of sequences, block size {B}",
                           actions + [["swap_out", g] for g in groups(rng, 6)], B, n_blocks=64, cpu_blocks=64))
    return cases


def plan_swap_in(rng):
    core = core_rng("swap.swap_in")
    cases = [
        swap_case("one sequence, block size 4",
                  [["seq", 9, seed(core)], ["seq", 5, seed(core)], ["swap_out", [0]], ["scribble", seed(core)],
                   ["swap_in", 0], ["read"]], 4),
        swap_case("three forks sharing a partly filled block, a fourth outside the group, block size 3",
                  [*forks(core, 3), ["fork", 0], ["swap_out", [0, 1, 2]], ["scribble", seed(core)], ["swap_in", 0],
                   ["read"]], 3),
        swap_case("beams out in two groups, in again in the other order, block size 2",
                  [*beams(core, 2), ["swap_out", [1, 2, 3]], ["swap_out", [0]], ["scribble", seed(core)],
                   ["swap_in", 1], ["swap_in", 0], ["read"]], 2),
        swap_case("a group listed out of order on a fragmented pool, block size 1",
                  [["hold", 3], ["seq", 3, seed(core)], ["branch", 0, 2, 2, seed(core)], ["fork", 1],
                   ["seq", 1, seed(core)], ["unhold"], ["hold", 2], ["swap_out", [2, 0, 1]], ["unhold"], ["hold", 4],
                   ["scribble", seed(core)], ["swap_in", 0], ["read"]], 1, n_blocks=14),
    ]
    B = pick(rng, (2, 5, 6, 8))
    parts = groups(rng, 6)
    ins = [["swap_in", int(h)] for h in rng.permutation(len(parts))]
    cases.append(swap_case(f"a drawn tree of sequences, block size {B}",
                           tree(rng, B, 6) + [["swap_out", g] for g in parts] + [["scribble", seed(rng)]] + ins
                           + [["read"]], B, n_blocks=64, cpu_blocks=64))
    return cases


def plan_all_or_nothing(rng):
    core = core_rng("swap.all_or_nothing")
    cases = [
        swap_case("CPU blocks: three forks fit 2 CPU blocks exactly, another sequence then does not, block size 4",
                  [*forks(core, 4), ["seq", 5, seed(core)], ["swap_out", [0, 1, 2]], ["swap_out", [3]],
                   ["swap_in", 0], ["swap_out", [3]]], 4, cpu_blocks=2),
        swap_case("the pool: beams come back when their 7 blocks are free, not before, block size 3",
                  [*beams(core, 3), ["swap_out", [0, 1, 2, 3]], ["hold_until", 6], ["swap_in", 0], ["unhold"],
                   ["hold_until", 7], ["swap_in", 0]], 3, n_blocks=16),
        swap_case("both: four forks, block size 2",
                  [*forks(core, 2, 4), ["seq", 6, seed(core)], ["swap_out", [0, 1, 2, 3]], ["swap_out", [4]],
                   ["hold_until", 1], ["swap_in", 0], ["unhold"], ["swap_in", 0], ["swap_out", [4]]], 2,
                  n_blocks=12, cpu_blocks=3),
    ]
    B = pick(rng, (1, 5, 6, 8))
    actions = tree(rng, B, 5)
    cases.append(swap_case(f"a drawn tree of sequences, block size {B}",
                           actions + [["swap_out", [0, 1, 2, 3, 4]], ["hold_until", 0], ["swap_in", 0], ["unhold"],
                                      ["swap_in", 0]], B, n_blocks=48, cpu_blocks=48))
    return cases


def plan_errors(rng):
    def script(g, B):
        return [["seq", B + 1, seed(g)], ["seq", 2 * B + 1, seed(g)], ["fork", 1],
                ["swap_out", []], ["swap_out", [0, 0]], ["swap_out", [1, 2, 1]], ["swap_out", [0, "other"]],
                ["swap_in", "made_up"], ["swap_in", "other"], ["swap_out", [1, 2]], ["swap_in", 0], ["swap_in", 0],
                ["swap_in", "other"], ["swap_out", [0]], ["swap_in", "made_up"], ["swap_in", 1]]
    core = core_rng("swap.errors")
    return [swap_case("block size 4", script(core, 4), 4), swap_case("block size 1", script(core, 1), 1),
            swap_case(f"block size {(B := pick(rng, (2, 3, 5, 7)))}", script(rng, B), B)]


# ------------------------------------------------------------------------------------ the judge
SWAP_FIELDS = {       # per check: the actions whose fields it compares (None: every action), and the fields
    "swap_out": (("swap_out",), ("tables", "lengths", "references", "n_free", "n_out")),
    "swap_in": (("swap_in", "read"), ("tables", "lengths", "references", "n_free", "n_in", "returned", "kv")),
    "all_or_nothing": (None, ("unchanged",)),
    "errors": (None, ("unchanged",)),
}
_RECORD = {"op", "result", "error", "tables", "lengths", "held", "refcounts", "n_free", "n_out", "n_in"}
_WHAT = {
    "tables": "every sequence's table up to renaming (a block named by its first appearance)",
    "lengths": "the lengths", "n_free": "the space's n_free", "n_out": "n_out", "n_in": "n_in",
    "returned.tables": "the tables swap_in returned, up to renaming (a block named by its first appearance)",
    "returned.lengths": "the lengths of the sequences swap_in returned",
    "returned.same_pool": "whether each sequence swap_in returned is of the pool",
    "returned.taken": "the blocks swap_in's pool.alloc() calls handed out, in order, each named by its first "
                      "appearance in the tables returned (in order of first appearance: 0, 1, 2, ...)",
    "unchanged": "a call that raised must change nothing (tables, lengths, refcounts, the space's counters)",
}
_TEST_POOL_CALLS = ("seq", "fork", "branch", "free", "hold", "hold_until", "unhold", "scribble")


def _swap_ok(expected, got):
    """The submission's answer has swap_script's form: the same actions, each record with its fields,
    a successful swap_in's result naming sequences that exist."""
    if not isinstance(got, dict) or set(got) != {"layout", "records", "part2"} or not isinstance(got["records"], list) \
            or len(got["records"]) != len(expected["records"]):
        return False
    for e, g in zip(expected["records"], got["records"]):
        if not isinstance(g, dict) or set(g) != _RECORD or g["op"] != e["op"] or not isinstance(g["tables"], list) \
                or not all(isinstance(t, list) for t in g["tables"]) or not isinstance(g["lengths"], list) \
                or not isinstance(g["held"], list) or not isinstance(g["refcounts"], list):
            return False
        if e["op"][0] == "swap_in" and g["error"] is None:
            r = g["result"]
            if not (isinstance(r, dict) and set(r) == {"seqs", "same_pool", "taken", "kv"}
                    and isinstance(r["seqs"], list) and all(type(s) is int and 0 <= s < len(g["tables"]) for s in r["seqs"])
                    and isinstance(r["kv"], list) and len(r["kv"]) == len(r["seqs"])):
                return False
    return True


def _kv(e_rec, g_rec):
    """Where the K/V a swap_in's sequences (or a read's) give back first differ from the reference's."""
    e_kv, g_kv = (r["kv"] if isinstance(r, dict) else r for r in (e_rec["result"], g_rec["result"]))
    if not isinstance(g_kv, list) or len(g_kv) != len(e_kv):
        return "the K/V of a different number of sequences"
    for i, (e, g) in enumerate(zip(e_kv, g_kv)):
        if not isinstance(g, dict):
            return "K/V of the wrong form"
        why = kv_difference(e, g)
        if why:
            return f"sequence {i + 1} of {len(e_kv)}: {why}"
    return None


def _note(op, error):
    if op in _TEST_POOL_CALLS and error is not None:
        return "\n    (the test's own pool.alloc / incref / decref raised here, nothing of the swap space's: Part 1's, fix it first)"
    if op == "swap_in" and isinstance(error, dict) and error.get("kind") == "MemoryError":
        return ("\n    (swap_in takes its blocks with pool.alloc: if your pool's alloc runs out while n_free says blocks "
                "are free, that is Part 1's: fix Part 1 first)")
    return ""


def swap_judge(check):
    """A judge for swap_script cases: the error of every action (what raised first explains the rest),
    then SWAP_FIELDS[check] of rules.part6_view on the actions it names, against the reference's."""
    ops, fields = SWAP_FIELDS[check.split(".")[1]]

    def judge(case, expected, got, ctx=None):
        if not _swap_ok(expected, got):
            return "  the answer has the wrong form (was the scenario code tampered with?)"
        try:
            e_view, g_view = part6_view(expected), part6_view(got)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return "  the answer has the wrong form (was the scenario code tampered with?)"
        said = describe_swap_actions(expected["records"])
        for n, (e, g) in enumerate(zip(e_view, g_view)):
            where = f"  after action {n + 1} of {len(said)}, {said[n]}:"
            op = expected["records"][n]["op"][0]
            if e["error"] != g["error"]:
                return (f"{where}\n    the error: expected {e['error'] or 'no error'}, got "
                        f"{outcome(got['records'][n]['error'])}" + _note(op, got["records"][n]["error"]))
            if ops is not None and op not in ops:
                continue
            if "references" in fields and g["references"] != e["references"]:
                bad = g["references"]
                return f"{where}\n    " + (bad if isinstance(bad, str) else (
                    f"block {their(bad[0][0], 'id')}'s refcount is {their(bad[0][1], 'count')} off the table entries "
                    "and the test's blocks naming it: every entry of a table holds one reference, and nothing else "
                    "does here"))
            for f in fields:
                if f in ("references", "kv") or f not in e:
                    continue
                pairs = [(f"returned.{k}", e[f][k], (g.get(f) or {}).get(k)) for k in e[f]] if f == "returned" \
                    else [(f, e[f], g.get(f))]
                for name, want, got_f in pairs:
                    found = first_mismatch(want, got_f, path=name.split(".")[-1])
                    if found:
                        return f"{where}\n    {_WHAT[name]}: {found[1]}"
            if "kv" in fields and e["error"] is None:
                why = _kv(expected["records"][n], got["records"][n])
                if why:
                    return f"{where}\n    the K/V read back through the tables: {why}"
        return None
    return judge


def layout_judge(case, expected, got, ctx=None):
    """swap.layout: the new space's attributes and storage, exactly the reference's."""
    if not isinstance(got, dict) or set(got) != {"layout", "records", "part2"}:
        return "  the answer has the wrong form (was the scenario code tampered with?)"
    return generic_judge(case, expected["layout"], got["layout"])


PLANS = {
    "swap.layout": plan_layout,
    "swap.swap_out": plan_swap_out,
    "swap.swap_in": plan_swap_in,
    "swap.all_or_nothing": plan_all_or_nothing,
    "swap.errors": plan_errors,
}
JUDGES = {check: naming_part2(layout_judge if check == "swap.layout" else swap_judge(check)) for check in PLANS}


def test_swap(case, judge):
    judge(case)
