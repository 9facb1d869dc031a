"""State coverage: which states each part's hidden cases reach, read from the plans themselves (the
cases' inputs and the reference's answers), seed by seed.

    python -m grader.selftest.coverage [--seeds 0-4]

Whether a bug is caught must not depend on the student: every state a part's observables depend on
(tables in any order, shared and partly filled last blocks, block size 1 and larger than a sequence,
exact fits, chunks that span blocks, every layer, every kind of bad input, ...) is reached by the core
cases, whose shape is the same for every seed. `missing(seed)` lists the states some part does not
reach at that seed; checks/test_coverage.py requires none for seeds 0-4, and this command prints the
table. A state is a predicate over one case (its scenario, inputs and the reference's answer).
"""
import argparse
import sys

from grader import paths

paths.trusted_imports()
import registry  # noqa: E402    tests/registry.py
import scenarios  # noqa: E402

from grader.selftest import inprocess  # noqa: E402


def _records(answer):
    return answer.get("records", []) if isinstance(answer, dict) else answer if isinstance(answer, list) else []


def _ops(case):
    return case.inputs.get("actions") or case.inputs.get("ops") or []


def _cfg(case):
    return scenarios.config(case.inputs.get("cfg"))


# ------------------------------------------------------------------------------------ Part 1
def _pool(case, answer, op, kind):
    return case.scenario == "pool_script" and any(r["op"][0] == op and (r["error"] or {}).get("kind") == kind
                                                  for r in _records(answer))


def _reused(case, answer):
    """A block given back (refcount 0) and handed out again, lower than one handed out before it."""
    if case.scenario != "pool_script":
        return False
    freed, highest = set(), -1
    for r in _records(answer):
        if r["op"][0] in ("alloc", "copy") and r["error"] is None:
            if r["result"] in freed and r["result"] < highest:
                return True
            highest = max(highest, r["result"])
        freed |= {b for b, rc in enumerate(r["refcounts"]) if rc == 0 and b <= highest}
    return False


def _bad_ids(case, answer):
    specs = {(op[0], str(op[1][1] if isinstance(op[1], list) and op[1][0] == "id" else op[1]))
             for op in _ops(case) if len(op) > 1}
    n = case.inputs.get("n_blocks", 0)
    wanted = {(call, spec) for call in ("incref", "decref", "copy", "refcount")
              for spec in ("-1", str(n), "freed", "unused")}
    return case.scenario == "pool_script" and wanted <= specs


PART1 = {
    "a full pool: alloc raises MemoryError": lambda c, a: _pool(c, a, "alloc", "MemoryError"),
    "copy_block on a full pool": lambda c, a: _pool(c, a, "copy", "MemoryError"),
    "a freed block handed out again before a higher one": _reused,
    "a refcount of 3": lambda c, a: c.scenario == "pool_script" and any(
        3 in r["refcounts"] for r in _records(a)),
    "numpy integer ids": lambda c, a: any(len(op) > 1 and isinstance(op[1], list) and op[1][0] in ("int64", "int32")
                                          for op in _ops(c)),
    "-1, n_blocks, a freed and an unused block given to every call": _bad_ids,
    "a pool of one block of 1": lambda c, a: c.inputs.get("n_blocks") == 1 and c.inputs.get("block_size") == 1,
}


# ------------------------------------------------------------------------------------ Part 2
def _steps(case, answer):
    """(op, the record before, the record after) of every step that succeeded in the reference's run."""
    records, out = _records(answer), []
    for before, after in zip([None] + records, records):
        if after["op"][0] in ("step", "fit", "prefill") and after["error"] is None and before is not None:
            out.append((after["op"], before, after))
    return out


def _idx(op):
    return [op[1]] if op[0] == "prefill" else op[1]


def _sizes(op):
    return [len(op[2])] if op[0] == "prefill" else [len(c) for c in op[2]]


def _out_of_order(table):
    return any(b > c for b, c in zip(table, table[1:]))


def _step_over_disorder(case, answer):
    return any(any(_out_of_order(before["tables"][i]) for i in _idx(op)) for op, before, _ in _steps(case, answer))


def _read_over_disorder(case, answer):
    return any(r["op"][0] == "read" and r["error"] is None and _out_of_order(r["tables"][r["op"][1]])
               for r in _records(answer)) if case.scenario == "step_script" else False


def _crossing(case, answer, at_least):
    B = case.inputs.get("block_size", 1)
    return any(any((L + n - 1) // B - L // B >= at_least for i, n in zip(_idx(op), _sizes(op))
                   for L in [before["lengths"][i]]) for op, before, _ in _steps(case, answer))


def _boundary(case, answer, where):
    B = case.inputs.get("block_size", 1)
    for op, before, after in _steps(case, answer):
        for i in _idx(op):
            L0, L1 = before["lengths"][i], after["lengths"][i]
            if (where == "start" and L0 and L0 % B == 0) or (where == "end" and L1 % B == 0 and B > 1):
                return True
    return False


def _mixed_batch(case, answer):
    return any(len({before["lengths"][i] for i in op[1]}) > 1 and op[1] != sorted(op[1])
               for op, before, _ in _steps(case, answer) if op[0] != "prefill")


def _every_layer(case, answer):
    layers = {op[2] for op in _ops(case) if op[0] == "read"}
    return case.scenario == "step_script" and layers >= set(range(_cfg(case).n_layers))


def _edge_tokens(case, answer):
    V = _cfg(case).vocab
    return any({0, V - 1} <= {t for chunk in op[2] for t in chunk} for op, _, _ in _steps(case, answer)
               if op[0] != "prefill")


def _bad(kind):
    def test(case, answer):
        if case.scenario != "step_script":
            return False
        cfg = _cfg(case)
        lengths = {}
        for r in _records(answer):
            op = r["op"]
            if op[0] == "step" and r["error"] and r["error"]["kind"] == "ValueError":
                chunks, idx = op[2], op[1]
                got = {"count": len(idx) != len(chunks), "empty": any(len(c) == 0 for c in chunks),
                       "negative": any(t < 0 for c in chunks for t in c),
                       "vocab": any(t >= cfg.vocab for c in chunks for t in c),
                       "max_len": any(lengths.get(i, 0) + len(c) > cfg.max_len for i, c in zip(idx, chunks))}
                if got.get(kind):
                    return True
            if op[0] == "reserve" and kind == "reserve" and r["error"] and r["error"]["kind"] == "ValueError":
                return True
            lengths = dict(enumerate(r["lengths"]))
        return False
    return test


def _copy_counted(case, answer):
    ops = [op[0] for op in _ops(case)]
    return "fit" in ops and ("share" in ops or "mirror" in ops)


PART2 = {
    "a step over a table out of order": _step_over_disorder,
    "a read through a table out of order": _read_over_disorder,
    "a block the test gave back mid-way": lambda c, a: c.scenario == "step_script" and any(
        op[0] == "release" for op in _ops(c)[next((k for k, o in enumerate(_ops(c)) if o[0] == "new"), 0):]),
    "block size 1": lambda c, a: c.scenario == "step_script" and c.inputs["block_size"] == 1,
    "a block larger than a whole sequence": lambda c, a: c.scenario == "step_script" and any(
        0 < L < c.inputs["block_size"] for L in (_records(a)[-1]["lengths"] if _records(a) else [])),
    "a chunk across two block boundaries": lambda c, a: _crossing(c, a, 2),
    "a step starting on a block boundary": lambda c, a: _boundary(c, a, "start"),
    "a step ending on a block boundary": lambda c, a: _boundary(c, a, "end"),
    "a batch of sequences at other positions, not in creation order": _mixed_batch,
    "stored K/V overwritten by the test, then a step": lambda c, a: any(
        op[0] == "poke" for op in _ops(c)) and c.scenario == "step_script",
    "every layer read": _every_layer,
    "reserve, write and read past the length": lambda c, a: {"reserve", "write", "read"} <= {op[0] for op in _ops(c)},
    "an exact fit": lambda c, a: any(op[0] == "fit" for op in _ops(c)),
    "one block short": lambda c, a: any(op[0] == "miss" for op in _ops(c)),
    "a bare reserve that does not fit": lambda c, a: c.scenario == "step_script" and any(
        r["op"][0] == "reserve" and (r["error"] or {}).get("kind") == "MemoryError" for r in _records(a)),
    "the copy of a shared partly filled block counted": _copy_counted,
    "token ids 0 and vocab - 1": _edge_tokens,
    "max_len reached exactly": lambda c, a: any(_cfg(c).max_len in after["lengths"] for _, _, after in _steps(c, a)),
    **{f"bad input: {kind}": _bad(kind) for kind in ("count", "empty", "negative", "vocab", "max_len", "reserve")},
    "a chunk as a numpy array": lambda c, a: any(op[0] == "step" and len(op) > 3 and op[3] for op in _ops(c)),
    "a Config of one layer and one of one head": lambda c, a: False,      # (judged over the part: _any_config)
    "the empty step": lambda c, a: any(op[0] == "step" and op[1] == [] for op in _ops(c)),
}


# ------------------------------------------------------------------------------------ Part 3
def _bw(case, answer, test):
    B = case.inputs.get("block_size")
    return case.scenario == "blockwise" and any(test(q, B) for q in case.inputs["cases"])


PART3 = {
    **{f"length k*B{d:+d}".replace("+0", ""): (lambda d: lambda c, a: _bw(
        c, a, lambda q, B: B > 1 and q["length"] > B and (q["length"] - d) % B == 0))(d) for d in (-1, 0, 1)},
    "block size 1": lambda c, a: _bw(c, a, lambda q, B: B == 1),
    "a block size above 16": lambda c, a: _bw(c, a, lambda q, B: B > 16),
    "a table out of order": lambda c, a: _bw(c, a, lambda q, B: _out_of_order(q["table"][:-(-q["length"] // B)])),
    "a spare block in the table": lambda c, a: _bw(c, a, lambda q, B: len(q["table"]) > -(-q["length"] // B)),
    "layer 1": lambda c, a: _bw(c, a, lambda q, B: q["layer"] == 1),
    "large scores": lambda c, a: _bw(c, a, lambda q, B: "q_scale" in q),
    "length 0": lambda c, a: _bw(c, a, lambda q, B: q["length"] == 0),
    "another Config": lambda c, a: c.scenario == "blockwise" and c.inputs.get("cfg") is not None,
}


# ------------------------------------------------------------------------------------ Part 4
def _sharing(case, answer, test):
    """test(op, before, after, B) over the reference's records of a sharing script."""
    if case.scenario != "sharing_script":
        return False
    B, records = case.inputs["block_size"], _records(answer)
    return any(test(after["op"], before, after, B) for before, after in zip(records, records[1:]))


def _written(kind):
    def test(op, before, after, B):
        if op[0] not in ("grow", "reserve", "step") or (op[0] == "grow" and kind == "full shared"):
            return False            # (grow takes a block itself at a boundary: reserve does not see the full one)
        for i in ([op[1]] if op[0] != "step" else op[1]):
            table, L = before["tables"][i], before["lengths"][i]
            if table:
                shared = before["refcounts"][table[-1]] > 1
                full = L % B == 0
                if (kind, shared, full) in (("partial shared", True, False), ("full shared", True, True),
                                            ("partial unshared", False, False)):
                    return True
                if kind == "3 holders" and before["refcounts"][table[-1]] >= 3 and not full:
                    return True
        return False
    return test


def _fork_of(kind):
    def test(op, before, after, B):
        if op[0] != "fork":
            return False
        L = before["lengths"][op[1]]
        return {"partial": L % B != 0, "full": L > 0 and L % B == 0, "empty": L == 0}[kind]
    return test


PART4 = {
    "fork of a partly filled table": lambda c, a: _sharing(c, a, _fork_of("partial")),
    "fork of a table of whole blocks": lambda c, a: _sharing(c, a, _fork_of("full")),
    "a shared partly filled last block written": lambda c, a: _sharing(c, a, _written("partial shared")),
    "a shared full last block written": lambda c, a: _sharing(c, a, _written("full shared")),
    "an unshared partly filled last block written": lambda c, a: _sharing(c, a, _written("partial unshared")),
    "3 or more holders of a partly filled block": lambda c, a: _sharing(c, a, _written("3 holders")),
    "free of a shared sequence": lambda c, a: _sharing(c, a, lambda op, b, _, B: op[0] == "free" and any(
        b["refcounts"][x] > 1 for x in b["tables"][op[1]])),
    "free of an empty sequence": lambda c, a: _sharing(c, a, lambda op, b, _, B: op[0] == "free"
                                                       and not b["tables"][op[1]]) or any(
        op == ["free", 0] and k == 1 for k, op in enumerate(_ops(c))),
    "steps on forks (paged_step)": lambda c, a: c.scenario == "sharing_script" and any(
        op[0] == "step" for op in _ops(c)),
    "parallel sampling, a partly filled prompt block": lambda c, a: c.scenario == "sampling" and len(
        c.inputs["prompt"]) % c.inputs["block_size"] != 0,
    "beam search of width 4 or more": lambda c, a: c.scenario == "beams" and c.inputs["k"] >= 4,
}


# ------------------------------------------------------------------------------------ Part 5
def _prefix(case, answer, test):
    return case.scenario == "prefix_script" and any(test(r) for r in _records(answer))


PART5 = {
    "a hit of two blocks or more": lambda c, a: _prefix(c, a, lambda r: r["op"][0] == "request" and r["error"] is None
                                                        and len(r["result"]["hits"]) >= 2),
    "a prompt of whole blocks (the lookup cap)": lambda c, a: c.scenario == "prefix_script" and any(
        op[0] == "request" and op[1] and len(op[1]) % c.inputs["block_size"] == 0 for op in _ops(c)),
    "an overwritten hit block": lambda c, a: any(op[0] == "overwrite" for op in _ops(c)),
    "an eviction": lambda c, a: _prefix(c, a, lambda r: r["op"][0] == "evict" and r["error"] is None
                                        and r["result"] >= 1),
    "a request that must evict": lambda c, a: c.scenario == "prefix_script" and any(
        op[0] == "hold_until" for op in _ops(c)),
    "a request that cannot fit (MemoryError)": lambda c, a: _prefix(c, a, lambda r: r["op"][0] == "request" and (
        r["error"] or {}).get("kind") == "MemoryError"),
    "bad calls": lambda c, a: any(op[0] == "bad_prefill" for op in _ops(c)),
    "block size 1": lambda c, a: c.scenario == "prefix_script" and c.inputs["block_size"] == 1,
}

# ------------------------------------------------------------------------------------ Part 6
def _swaps(case, answer, op, test):
    """test(rec, before, B) over the reference's records of a swap script's `op` actions."""
    if case.scenario != "swap_script":
        return False
    records, B = _records(answer), case.inputs["block_size"]
    return any(after["op"][0] == op and test(after, before, B) for before, after in zip(records, records[1:]))


def _group_of(rec, before):
    return [before["tables"][s] for s in rec["op"][1] if isinstance(s, int)]


def _shares_partial(rec, before, B):
    tables = _group_of(rec, before)
    lengths = [before["lengths"][s] for s in rec["op"][1] if isinstance(s, int)]
    return rec["error"] is None and any(L % B and sum(t[-1:] == u[-1:] for u in tables) > 1
                                        for t, L in zip(tables, lengths))


def _shared_outside(rec, before, B):
    group = {b for t in _group_of(rec, before) for b in t}
    outside = {b for s, t in enumerate(before["tables"]) if s not in rec["op"][1] for b in t}
    return rec["error"] is None and bool(group & outside)


def _fragmented_in(rec, before, B):
    taken = (rec["result"] or {}).get("taken") if rec["error"] is None else None
    return bool(taken) and sorted(taken) != list(range(min(taken), min(taken) + len(taken)))


def _cpu_exact(rec, before, B):
    tables = _group_of(rec, before)
    d = len({b for t in tables for b in t})
    return rec["error"] is None and d == before["n_free"] and sum(map(len, tables)) > d


def _in_order(case, answer):
    ins = [op[1] for op in _ops(case) if op[0] == "swap_in" and isinstance(op[1], int)]
    return case.scenario == "swap_script" and ins != sorted(ins)


def _again_after(case, answer, kind):
    """A swap_in that raised `kind`, then the same handle swapped in."""
    failed = [r["op"][1] for r in _records(answer) if r["op"][0] == "swap_in" and (r["error"] or {}).get("kind") == kind]
    return case.scenario == "swap_script" and any(
        r["op"] == ["swap_in", h] and r["error"] is None for h in failed for r in _records(answer))


def _bad_swap(op, arg):
    def test(case, answer):
        return _swaps(case, answer, op, lambda r, b, B: (r["error"] or {}).get("kind") == "ValueError" and arg(r["op"][1]))
    return test


PART6 = {
    "forks sharing a partly filled block, swapped out together": lambda c, a: _swaps(c, a, "swap_out", _shares_partial),
    "a group sharing a block with a sequence outside it": lambda c, a: _swaps(c, a, "swap_out", _shared_outside),
    "a group listed out of its sequences' order": lambda c, a: _swaps(c, a, "swap_out", lambda r, b, B: (
        r["error"] is None and r["op"][1] != sorted(r["op"][1]))),
    "swap_in on a pool whose free blocks are not one run": lambda c, a: _swaps(c, a, "swap_in", _fragmented_in),
    "the freed blocks overwritten before swap_in": lambda c, a: c.scenario == "swap_script" and any(
        op[0] == "scribble" for op in _ops(c)),
    "groups swapped in in another order than out": _in_order,
    "CPU blocks fitting exactly, fewer than the entries": lambda c, a: _swaps(c, a, "swap_out", _cpu_exact),
    "swap_out short of CPU blocks": lambda c, a: _swaps(c, a, "swap_out", lambda r, b, B: (
        (r["error"] or {}).get("kind") == "MemoryError")),
    "swap_in short of pool blocks, then the same handle": lambda c, a: _again_after(c, a, "MemoryError"),
    "a handle used twice": lambda c, a: _again_after(c, a, "ValueError") or _swaps(c, a, "swap_in", lambda r, b, B: (
        (r["error"] or {}).get("kind") == "ValueError" and isinstance(r["op"][1], int))),
    "an empty group": _bad_swap("swap_out", lambda g: g == []),
    "a sequence twice in a group": _bad_swap("swap_out", lambda g: len(set(map(str, g))) < len(g)),
    "a sequence of another pool": _bad_swap("swap_out", lambda g: "other" in g),
    "a handle no space returned": _bad_swap("swap_in", lambda h: h == "made_up"),
    "another space's handle": _bad_swap("swap_in", lambda h: h == "other"),
    "block size 1": lambda c, a: c.scenario == "swap_script" and c.inputs["block_size"] == 1 and bool(_ops(c)),
    "another Config": lambda c, a: c.scenario == "swap_script" and c.inputs.get("cfg") is not None,
}

STATES = {"allocator": PART1, "paged_step": PART2, "blockwise_attention": PART3, "copy_on_write": PART4,
          "prefix_cache": PART5, "swap": PART6}
PART_WIDE = {("paged_step", "a Config of one layer and one of one head"):
             lambda cases: {1} <= {_cfg(c).n_layers for c, _ in cases} and {1} <= {_cfg(c).n_heads for c, _ in cases}}


def reached(seed, reference=None):
    """{part: {state: the checks whose cases reach it}} for one seed."""
    if reference is None:
        import paged_kv as reference      # (the trusted imports put the reference on sys.path)
    out = {part: {state: [] for state in states} for part, states in STATES.items()}
    by_part = {}
    for check_id in inprocess.bound_checks():
        part = registry.CHECKS[check_id].part
        cases = [c for c in inprocess.cases(check_id, seed) if c.scenario != "replays"]
        answers = scenarios.batch(reference, [[c.scenario, c.inputs] for c in cases])
        by_part.setdefault(part, []).extend(zip(cases, answers))
        for state, test in STATES.get(part, {}).items():
            if any(test(c, a) for c, a in zip(cases, answers)):
                out[part][state].append(check_id)
    for (part, state), test in PART_WIDE.items():
        if test(by_part.get(part, [])):
            out[part][state].append(part)
    return out


def missing(seed, reference=None):
    """["part: state", ...] that no case of the part reaches at this seed."""
    return [f"{part}: {state}" for part, states in reached(seed, reference).items()
            for state, where in states.items() if not where]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-4", help="a range like 0-4")
    args = ap.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    table = {seed: reached(seed) for seed in seeds}
    bad = 0
    for part, states in STATES.items():
        print(f"{part}:")
        for state in states:
            seen = [seed for seed in seeds if table[seed][part][state]]
            checks = sorted({c for seed in seeds for c in table[seed][part][state]})
            bad += len(seen) < len(seeds)
            mark = "every seed" if len(seen) == len(seeds) else f"seeds {seen} only"
            print(f"  {state:62s} {mark:16s} {', '.join(c.split('.')[-1] for c in checks)}")
    print(f"\n{bad} states not reached on every seed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
