"""Every check earns its place: a mutant it catches that the other checks of its part all miss.

A check no mutant singles out either duplicates another check of its part (its points are then
charged twice for one bug) or catches nothing (a check that always passes). run.py calls `unearned`
once, on the points each mutant's grading lost per check (cascade.check_losses of its results.json),
when it graded the whole mutant corpus; a check without such a mutant fails the selftest unless
mutants.JOINT says why it cannot have one, and a JOINT entry for a check that has one fails too
(the line would hide a change). A sweep (mutants.SWEEPS: random_ops replays every targeted check's
calls) is excused the same way and does not count against the others either.
No extra grading: the mutants' results.json already hold it.
"""
EPS = 1e-6


def unique_mutants(losses, part_of, eps=EPS, sweeps=()):
    """{check id: [mutants that lose points in it and in no other check of its part, sweeps aside]}. losses: {mutant: {check id: points lost}}; part_of: {check id: part id} (the graded checks)."""
    found = {c: [] for c in part_of}
    for mutant, lost in losses.items():
        for c, part in part_of.items():
            if lost.get(c, 0.0) > eps and not any(lost.get(o, 0.0) > eps for o, p in part_of.items()
                                                 if p == part and o != c and o not in sweeps):
                found[c].append(mutant)
    return found


def unearned(losses, part_of, joint, sweeps=None, eps=EPS):
    """The selftest's failures: a check with no mutant of its own and no reason in `joint` or `sweeps`
    (dicts check id -> why), and a reason for a check that has a mutant of its own after all (one
    that no other check of its part catches, sweeps included)."""
    sweeps = sweeps or {}
    failures = []
    strict = unique_mutants(losses, part_of, eps)
    for c, mutants in unique_mutants(losses, part_of, eps, sweeps).items():
        if c in joint or c in sweeps:
            mutants = strict[c]
        if not mutants and c not in joint and c not in sweeps:
            failures.append(f"check {c} earns no place: no mutant loses points in it alone among the checks of its "
                            "part (write one in mutants.py, or say why it cannot have one in mutants.JOINT)")
        elif mutants and (c in joint or c in sweeps):
            failures.append(f"check {c} has a mutant of its own ({', '.join(sorted(mutants)[:3])}): remove its "
                            "mutants.JOINT or SWEEPS line")
    return failures


def measure(seed=0):
    """{mutant: {check id: 1.0}} for the checks of its parts it fails at this seed, judged in this
    process (inprocess.py: our own corpus, no grading): a quick look at what run.py enforces."""
    from grader import rubric
    from grader.selftest import inprocess, mutants
    ref = inprocess.load(mutants.REFERENCE, "earns_ref")
    bound = inprocess.bound_checks()
    out = {}
    for m in mutants.MUTANTS:
        pk = inprocess.load_text(mutants.apply(m), f"earns_{m.name}")
        mine = [c for c in bound if rubric.CHECKS[c].part in m.parts]
        out[m.name] = dict.fromkeys(inprocess.failed_checks(pk, ref, seed, mine), 1.0)
    return out


def main(argv=None):
    """python -m grader.selftest.earns [--seed N]: each check's own mutants, judged in process."""
    import argparse
    import json
    from grader import rubric
    from grader.selftest import mutants
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write {mutant: {check: 1.0}} here")
    args = ap.parse_args(argv)
    losses = measure(args.seed)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(losses, f, indent=1)
    part_of = {c.id: c.part for c in rubric.CHECKS.values()}
    for c, ms in unique_mutants(losses, part_of, sweeps=mutants.SWEEPS).items():
        why = mutants.JOINT.get(c) or mutants.SWEEPS.get(c) or "NONE"
        print(f"{c:38s} {len(ms):2d} own: {', '.join(ms[:4]) or '-- ' + why[:80]}")
    failures = unearned(losses, part_of, mutants.JOINT, mutants.SWEEPS)
    print("\n".join(failures) or "every check earns its place")
    return 1 if failures else 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
