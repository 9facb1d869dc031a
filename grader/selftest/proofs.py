"""The proofs over a corpus's records (measure.py), each a pure function returning its violations, and
the summary the generate command prints. Nothing here grades: the selftest can enforce any of them on
records it already has (checks/test_proofs.py shows each on small records).

  kill_violations      a mutant that loses no point on some seed (not listed as equivalent)
  oracle_violations    a mutant failing a public test of part P whose hidden grading loses nothing in P
                       on some seed (the public tests are an oracle the grader has had all along)
  cascade_violations   a mutant losing points outside its parts on some seed, unless every such loss is
                       named: each check losing them says "fix Part N first" with N one of its parts
  spread_violations    a mutant whose total loss differs by more than `limit` points between seeds
  nonetype_messages    every feedback message saying "got NoneType" (the code raised, or returned None?)
  violations           all of them as lines (generate --enforce, make check's sample)
A seed whose grading failed ("lost": None) is left out of every proof (and counted in the summary).
"""
import re
import statistics

EPS = 1e-6
NAMED = re.compile(r"fix Part (\d+)")
NONETYPE = "got NoneType"


def _graded(rec):
    """{seed: its record} of the seeds that were graded."""
    return {s: v for s, v in rec["seeds"].items() if v.get("lost") is not None}


def total(seed_rec):
    return round(sum(seed_rec["lost"].values()), 3)


def _part_of(check_id):
    return check_id.split(".")[0]


def spared(rec, eps=EPS):
    """Graded on some seed, and losing nothing on any."""
    seeds = _graded(rec)
    return bool(seeds) and all(total(v) <= eps for v in seeds.values())


def kill_violations(records, equivalent=(), eps=EPS):
    """[(name, [seeds on which it loses nothing])] of the mutants not killed on every seed."""
    out = []
    for rec in records:
        spared = [s for s, v in _graded(rec).items() if total(v) <= eps]
        if spared and rec["name"] not in equivalent:
            out.append((rec["name"], spared))
    return out


def oracle_violations(records, eps=EPS):
    """[(name, part, [seeds])]: its public tests of `part` fail, its hidden grading loses nothing there."""
    out = []
    for rec in records:
        for part in sorted(p for p in rec["public"] if not p.startswith("(")):
            seeds = [s for s, v in _graded(rec).items() if v["lost"].get(part, 0.0) <= eps]
            if seeds:
                out.append((rec["name"], part, seeds))
    return out


def cascades(records, numbers, eps=EPS):
    """[(name, {seed: {part: points lost outside its parts}}, named)] of every mutant losing points
    outside its labelled parts on some seed. named: every check losing them there says "fix Part N
    first" with N the number of one of its own parts (numbers: part -> its number)."""
    out = []
    for rec in records:
        own = {str(numbers[p]) for p in rec["parts"]}
        where, named = {}, True
        for s, v in _graded(rec).items():
            outside = {p: x for p, x in v["lost"].items() if x > eps and p not in rec["parts"]}
            if not outside:
                continue
            where[s] = outside
            for check, x in v["checks"].items():
                if x > eps and _part_of(check) in outside:
                    said = set(NAMED.findall(v["messages"].get(check, "")))
                    named = named and bool(said & own)
        if where:
            out.append((rec["name"], where, named))
    return out


def cascade_violations(records, numbers, eps=EPS):
    """[(name, {seed: {part: points}})] of the cascades that are not named dependencies."""
    return [(name, where) for name, where, named in cascades(records, numbers, eps) if not named]


def spread(rec):
    totals = [total(v) for v in _graded(rec).values()]
    return round(max(totals) - min(totals), 3) if totals else 0.0


def spread_violations(records, limit=2.0):
    """[(name, spread, {seed: total})] of the mutants whose total varies by more than `limit` points."""
    return [(rec["name"], spread(rec), {s: total(v) for s, v in _graded(rec).items()})
            for rec in records if spread(rec) > limit + EPS]


def nonetype_messages(records):
    """[(name, seed, check, line)] of every feedback line saying "got NoneType"."""
    return [(rec["name"], s, check, line.strip()) for rec in records for s, v in rec["seeds"].items()
            for check, text in v.get("messages", {}).items() for line in text.splitlines() if NONETYPE in line]


def violations(records, numbers, equivalent=(), limit=2.0, eps=EPS):
    """Every proof's violations as lines (empty: the corpus holds them all); what make check enforces
    on its sample of the generated corpus. A mutant with a seed not graded is one too: a case the
    grader could not judge proves nothing."""
    out = [f"not graded on seeds {[s for s, v in r['seeds'].items() if v.get('lost') is None]}: {r['name']}"
           for r in records if any(v.get("lost") is None for v in r["seeds"].values())]
    out += [f"kill: {n} loses no point on seeds {s} (not listed in equivalent.py)"
            for n, s in kill_violations(records, equivalent, eps)]
    out += [f"oracle: {n} fails public tests of {p} and loses no hidden point there on seeds {s}"
            for n, p, s in oracle_violations(records, eps)]
    out += [f"cascade: {n} loses points outside its parts without naming one to fix first: {w}"
            for n, w in cascade_violations(records, numbers, eps)]
    out += [f"spread: {n}'s total moves by {x} points over the seeds: {t}" for n, x, t in spread_violations(records, limit)]
    out += [f"NoneType: {n} at seed {s}, {c}: {line}" for n, s, c, line in nonetype_messages(records)]
    return out


# ------------------------------------------------------------------------------------ the summary
def summary(records, numbers, bonus, equivalent=(), eps=EPS):
    """The figures and lists of one corpus (JSON-able). bonus: the bonus parts' ids."""
    names = [r["name"] for r in records]
    by = {r["name"]: r for r in records}
    not_killed = dict(kill_violations(records, (), eps))
    graded = {n: len(_graded(by[n])) for n in names}
    never = [n for n in not_killed if spared(by[n], eps)]
    oracle = oracle_violations(records, eps)
    failing_public = {n for n in names if any(not p.startswith("(") for p in by[n]["public"])}
    survivors = [n for n in never if n not in failing_public]
    every = cascades(records, numbers, eps)
    core = [c for c in every if any(p not in bonus for w in c[1].values() for p in w)]
    into = [c for c in every if any(p in bonus for w in c[1].values() for p in w)]
    spreads = [spread(by[n]) for n in names if graded[n]]
    nonetype = nonetype_messages(records)

    def outside(where):
        worst = {}
        for w in where.values():
            for p, x in w.items():
                worst[p] = max(worst.get(p, 0.0), x)
        return worst

    def example(name, where):
        """A check losing points outside, at the first seed: one that names none of its parts if any."""
        own = {str(numbers[p]) for p in by[name]["parts"]}
        seed = next(iter(where))
        v = by[name]["seeds"][seed]
        out = [c for c, x in v["checks"].items() if x > eps and _part_of(c) in where[seed]]
        silent = [c for c in out if not set(NAMED.findall(v["messages"].get(c, ""))) & own]
        check = (silent or out or [None])[0]
        return check, (v["messages"].get(check, "") if check else "")[:600]

    top = sorted(every, key=lambda c: -sum(outside(c[1]).values()))
    return {
        "mutants": len(names),
        "ungraded": sorted(n for n in names if graded[n] < len(by[n]["seeds"])),
        "killed_every_seed": sum(1 for n in names if graded[n] and n not in not_killed),
        "killed_some_seeds": sorted(n for n in not_killed if n not in never),
        "not_killed": len(never),
        "failing_public_only": sorted(n for n in never if n in failing_public),
        "survivors": survivors,
        "equivalent_listed": sorted(n for n in survivors if n in equivalent),
        "survivors_not_equivalent": [{"name": n, "parts": by[n]["parts"], "bug": by[n]["bug"],
                                      "second_oracle": by[n].get("second_oracle")}
                                     for n in survivors if n not in equivalent],
        "survivors_second_oracle_kills": sorted(n for n in survivors if isinstance(by[n].get("second_oracle"), list)
                                                and by[n]["second_oracle"]),
        "survivors_second_oracle_not_run": sorted(n for n in survivors
                                                  if isinstance(by[n].get("second_oracle"), dict)),
        "equivalent_but_killed": sorted(n for n in equivalent if n in by and n not in survivors),
        "cascade": {"overall": len(every), "within_core": len(core), "into_bonus": len(into),
                    "named": sum(1 for c in every if c[2])},
        "cascades": [{"name": n, "parts": by[n]["parts"], "bug": by[n]["bug"], "named": named,
                      "worst_outside": outside(where), "seeds": sorted(where),
                      "own_loss": {s: round(sum(by[n]["seeds"][s]["lost"].get(p, 0.0) for p in by[n]["parts"]), 3)
                                   for s in sorted(where)},
                      "example": dict(zip(("check", "message"), example(n, where)))}
                     for n, where, named in top],
        "oracle_violations": [{"name": n, "parts": by[n]["parts"], "part": p, "own": p in by[n]["parts"], "seeds": s,
                               "bug": by[n]["bug"], "public": by[n]["public"][p][:6]} for n, p, s in oracle],
        "spread": {"median": statistics.median(spreads) if spreads else 0.0, "max": max(spreads, default=0.0)},
        "spread_over_2": [{"name": n, "spread": x, "totals": t, "bug": by[n]["bug"]}
                          for n, x, t in sorted(spread_violations(records, 2.0), key=lambda v: -v[1])],
        "nonetype": {"mutants": len({m[0] for m in nonetype}), "messages": len({m[:3] for m in nonetype}),
                     "lines": len(nonetype)},
        "nonetype_messages": _by_mutant(nonetype),
    }


def _by_mutant(nonetype):
    """{name: {"checks", "seeds", "lines", "example"}} of the "got NoneType" lines."""
    out = {}
    for name, seed, check, line in nonetype:
        m = out.setdefault(name, {"checks": [], "seeds": [], "lines": 0, "example": line})
        m["lines"] += 1
        for key, value in (("checks", check), ("seeds", seed)):
            if value not in m[key]:
                m[key].append(value)
    return out


def render(title, s):
    """The summary's figures as a few lines of text."""
    c = s["cascade"]
    return "\n".join([
        f"{title}: {s['mutants']} mutants" + (f" ({len(s['ungraded'])} with a seed not graded)" if s["ungraded"] else ""),
        f"  killed on every seed {s['killed_every_seed']}, on some seeds only {len(s['killed_some_seeds'])}, "
        f"on none {s['not_killed']} ({len(s['failing_public_only'])} of them fail public tests; survivors "
        f"{len(s['survivors'])}, {len(s['equivalent_listed'])} listed as equivalent, "
        f"{len(s['survivors_second_oracle_kills'])} failing verify_corpus's checks"
        + (f", {len(s['survivors_second_oracle_not_run'])} it could not check" if s.get("survivors_second_oracle_not_run")
           else "") + ")",
        f"  cascade: {c['overall']} overall, {c['within_core']} within Parts 1-4, {c['into_bonus']} into the bonus; "
        f"{c['named']} named (\"fix Part N first\")",
        f"  oracle: {len(s['oracle_violations'])} (mutant, part) pairs fail public tests of the part but lose no hidden "
        f"point there on some seed ({sum(o['own'] for o in s['oracle_violations'])} in the mutant's own parts, by "
        f"{len({o['name'] for o in s['oracle_violations'] if o['own']})} mutants; the others are public tests "
        "failing outside its parts)",
        f"  seed spread: median {s['spread']['median']:.2f}, max {s['spread']['max']:.2f}; "
        f"{len(s['spread_over_2'])} over 2 points",
        f"  \"got NoneType\": {s['nonetype']['mutants']} mutants, {s['nonetype']['messages']} messages (a check's "
        f"feedback at a seed), {s['nonetype']['lines']} lines",
    ])
