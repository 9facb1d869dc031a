"""Numeric margins: how close correct implementations come to each hidden tolerance.

    python -m grader.selftest.margins [--seeds 200] [--only reference,online_softmax] [--checks ID,...]

For every hidden check that compares arrays within a tolerance (Part 2's logits and K/V at 1e-10,
Part 3's outputs at 1e-12, Part 4's sharing twin and Part 5's cached prefill at 1e-10), the worst
|difference| its judge saw, per correct implementation (the reference and selftest/variants), over
seeds 0..N-1, as a fraction of the tolerance. The judge compares with the reference's answer (or,
for a twin, the implementation's own second run); for Part 3 the distance from the contract's
attention_core is measured too, since that is what the contract promises. A correct student must
not fail on an unlucky seed: every worst error stays MARGIN times under its tolerance
(checks/test_margins.py enforces it on a few seeds). Our own corpus only: it runs in this process.
"""
import argparse
import contextlib
import glob
import os
import sys
import types

import numpy as np

from grader.selftest import inprocess, mutants

import registry  # noqa: E402    tests/registry.py (inprocess put tests/ on sys.path)
import rules  # noqa: E402
import scenarios  # noqa: E402
import transformer_lab as tl  # noqa: E402
from explain import first_difference  # noqa: E402

from grader.hidden import compare  # noqa: E402

MARGIN = 10.0
VARIANTS = os.path.join(inprocess.HERE, "variants")
SLOW = ("slow_per_token",)           # correct but slow on purpose: left out unless named
CONTRACT = "contract"                # the key of Part 3's distance from attention_core


def log_sum_exp(q, seq, layer):
    """Part 3 as a log-sum-exp: weights exp(s - lse), lse = max + log(sum exp(s - max)), one pass
    for lse and one for the output; correct, but its rounding of lse scales every weight."""
    L, B = seq.length, seq.pool.block_size
    if L < 1:
        raise ValueError("length 0")
    n = -(-L // B)
    scores = [np.einsum("hd,mhd->hm", q, seq.pool.k[layer, seq.blocks[i], :min(B, L - i * B)]) / np.sqrt(q.shape[-1])
              for i in range(n)]
    top = np.max([s.max(axis=-1) for s in scores], axis=0)
    lse = top + np.log(np.sum([np.exp(s - top[:, None]).sum(axis=-1) for s in scores], axis=0))
    return sum(np.einsum("hm,mhd->hd", np.exp(s - lse[:, None]), seq.pool.v[layer, seq.blocks[i], :s.shape[1]])
               for i, s in enumerate(scores))


FORMULATIONS = {"log_sum_exp": log_sum_exp}     # Part 3 alone, judged on Part 3's checks only


def formulation(name):
    """A Part 3 formulation as an implementation: only blockwise_attention."""
    return types.SimpleNamespace(blockwise_attention=FORMULATIONS[name])


def judged_on(path, check_id):
    """Whether an implementation is judged on a check: not on a bonus part's, when it was written
    before that part existed (mutants.writes_part)."""
    part = registry.CHECKS[check_id].part
    if not registry.BY_ID[part].bonus:
        return True
    with open(path, encoding="utf-8") as f:
        return mutants.writes_part(f.read(), part)


def implementations(only=None):
    """{name: path} of the reference and the correct variants (all but SLOW, unless named in only),
    and {name: None} of the Part 3 formulations."""
    paths = {"reference": os.path.join(inprocess.REPO, "solution", "paged_kv.py")}
    for p in sorted(glob.glob(os.path.join(VARIANTS, "[!_]*.py"))):
        paths[os.path.basename(p)[:-3]] = p
    paths.update(dict.fromkeys(FORMULATIONS))
    if only:
        return {n: p for n, p in paths.items() if n in only}
    return {n: p for n, p in paths.items() if n not in SLOW}


@contextlib.contextmanager
def recording(worst):
    """Every array comparison a judge makes (explain.first_difference, wherever it is called from)
    records its max |difference| into worst[tol] while this is active."""
    def recorded(expected, got, tol, twin=False):
        e, g = np.asarray(expected, dtype=np.float64), np.asarray(got, dtype=np.float64)
        if e.shape == g.shape and e.size:
            err = float(np.max(np.abs(e - g))) if np.all(np.isfinite(g)) else float("inf")
            worst[tol] = max(worst.get(tol, 0.0), err)
        return first_difference(expected, got, tol, twin=twin)
    saved = compare.first_difference, rules.first_difference
    compare.first_difference = rules.first_difference = recorded
    try:
        yield
    finally:
        compare.first_difference, rules.first_difference = saved


def contract_error(case, got):
    """Part 3: the worst |difference| between an implementation's outputs and attention_core's on the
    case's own storage (the contract's promise), over its queries that answered."""
    cfg = scenarios.config(case.inputs["cfg"])
    worst = 0.0
    for c, g in zip(case.inputs["cases"], got):
        if c["length"] < 1 or g.get("out") is None:
            continue
        pool, q = scenarios.blockwise_inputs(cfg, case.inputs["n_blocks"], case.inputs["block_size"],
                                             case.inputs["seed"], c)
        used = c["table"][:-(-c["length"] // case.inputs["block_size"])]
        K = np.concatenate([pool.k[c["layer"], b] for b in used])[:c["length"]]
        V = np.concatenate([pool.v[c["layer"], b] for b in used])[:c["length"]]
        want = tl.attention_core(q[None, None], K, V, c["length"] - 1)[0, 0]
        worst = max(worst, float(np.max(np.abs(want - np.asarray(g["out"])))))
    return worst


def measure(pk, ref, seeds, checks=None, bound=None):
    """{check id: {tol: worst error}} (and {CONTRACT: ...} for Part 3) of pk over these seeds, and
    [(check id, seed, message)] of the cases it failed (a correct implementation fails none)."""
    bound = bound or inprocess.bound_checks()
    out, failed = {}, []
    for check_id in bound if checks is None else checks:
        worst = {}
        for seed in seeds:
            seen = []
            with recording(worst):
                messages = inprocess.judge_check(pk, ref, check_id, seed, bound, seen)
            failed += [(check_id, seed, m) for m in messages if m is not None]
            if check_id.startswith("blockwise_attention."):
                for case, _, got in seen:
                    if isinstance(got, list):
                        worst[CONTRACT] = max(worst.get(CONTRACT, 0.0), contract_error(case, got))
        if any(k != CONTRACT for k in worst):
            out[check_id] = worst
    return out, failed


def thin(report, margin=MARGIN):
    """[(check id, tol, worst)] whose worst error is not `margin` times under the tolerance (Part 3's
    contract distance is held to the same 1e-12)."""
    return [(c, tol, err) for c, worst in report.items() for tol, err in worst.items()
            if err * margin > (compare.ATTENTION_TOL if tol == CONTRACT else tol)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--only", default="", help="comma-separated implementations (reference, variant names)")
    ap.add_argument("--checks", default="", help="comma-separated check ids (default: every check)")
    args = ap.parse_args(argv)
    impls = implementations([n for n in args.only.split(",") if n] or None)
    ref = inprocess.load(implementations(["reference"])["reference"], "margins_ref")
    bound = inprocess.bound_checks()
    checks = [c for c in args.checks.split(",") if c] or None
    bad = 0
    for name, path in impls.items():
        if path is None:        # a Part 3 formulation: that part's checks alone
            pk = formulation(name)
            mine = [c for c in checks or bound if c.startswith("blockwise_attention.")]
            if not mine:
                continue
            report, failed = measure(pk, ref, range(args.seeds), mine, bound)
        else:
            pk = ref if name == "reference" else inprocess.load(path, f"margins_{name}")
            report, failed = measure(pk, ref, range(args.seeds), checks, bound)
            failed = [f for f in failed if judged_on(path, f[0])]
        for c, worst in report.items():
            for tol, err in sorted(worst.items(), key=str):
                limit = compare.ATTENTION_TOL if tol == CONTRACT else tol
                label = "vs attention_core" if tol == CONTRACT else f"tol {tol:g}"
                print(f"{name:22s} {c:36s} {label:18s} worst {err:.2e}  ({limit / err if err else float('inf'):.0f}x under)")
        for c, seed, m in failed[:5]:
            print(f"{name:22s} {c:36s} FAILED at seed {seed}: {m.strip()[:200]}")
        bad += len(thin(report)) + len(failed)
    print(f"\n{bad} thin margin(s) or failure(s) over {args.seeds} seeds (margin {MARGIN:g}x)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
