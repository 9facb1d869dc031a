"""Integrity flags for a graded class: what staff should look at before publishing. None of them
changes a grade; each says what was seen.

- not started: the file is the starter (either edition: with the bonus or without it, as
  tools/build_handout.py writes it), or it was graded and every case of every check it was graded
  on stopped at a TODO of the starter (stubs only).
- identical: files with the same bytes (a zip and a loose file count as the file they hold), in
  groups. Not-started files are left out: two untouched starters are identical by nature.
- near-copy of the solution: most of the file's own code (what is not the starter's) is the
  reference's, normalized as grader/resemblance.py does (read in its declared encoding, docstrings,
  no-op calls and dead stores gone, names canonical, definitions in a canonical order) or as written
  with names and strings abstracted: renamed variables, a new header, reordered definitions, padding
  and another encoding do not hide it. Independently written correct files share at most about a
  quarter of their code with the reference (the selftest's variants), a copy nearly all.
- similar to: files whose normalized or raw similarity reaches resemblance.FLAG, in clusters
  (grader/triage.py: a group of near-copies is one cluster), the reference among them.
- identity (grader/roster.py): a submission no roster row claims, two submissions claiming one id,
  a submission_metadata file inside a submission (ignored), a roster row without its submission.

`make similarity` shows the same clusters with copydetect's side-by-side view (a staff tool).
"""
from dataclasses import dataclass, field

from grader import paths, resemblance, triage

NEAR_COPY = resemblance.FLAG    # share of a file's own code found in the reference
NAMED = 4                       # members of its cluster a "similar to" flag names (the cluster lists them all)
TODO = "not implemented yet"     # how the hidden suites say a case stopped at a starter TODO (conftest._no_answer)


def starter_editions():
    """The bytes of every starter a student may have been given."""
    import importlib.util
    text = (paths.REPO / "starter" / "paged_kv.py").read_text(encoding="utf-8")
    spec = importlib.util.spec_from_file_location("build_handout", paths.REPO / "tools" / "build_handout.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return {text.encode(), build.without_bonus_python(text).encode()}


def is_starter(data, editions):
    return data is not None and (data in editions or data.replace(b"\r\n", b"\n") in editions)


def _todo_only(test):
    """A test with no point whose every failure stopped at a TODO (its output is "0 of N cases
    passed." then the distinct messages)."""
    said = [p for p in test["output"].split("\n\n")[1:] if p.strip()]
    return float(test["score"]) == 0 and bool(said) and all(_todo_paragraph(p) for p in said)


def _todo_paragraph(paragraph):
    """A message that stopped at a TODO, under its case's heading if it has one (a replays check's
    cases are headed by the runs they compare: "...:" then the message indented)."""
    lines = [line for line in paragraph.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":") and lines[1].startswith("  "):
        lines = lines[1:]
    return lines[0].strip().startswith(TODO)


def untouched(results, part):
    """Whether the part was left as the starter has it: graded, and every case of every check of it
    stopped at a TODO."""
    tests = [t for t in results.get("tests", []) if part in t.get("tags", [])]
    return bool(tests) and all(_todo_only(t) for t in tests)


def stubs_only(results):
    """Whether a graded result is nothing but the starter's stubs: every part it was graded on (a
    bonus not attempted is not graded) is untouched."""
    if not results or (results.get("extra_data") or {}).get("not_graded"):
        return False
    skipped = (results.get("extra_data") or {}).get("bonus") or {}
    parts = {tag for t in results.get("tests", []) for tag in t.get("tags", [])} - set(skipped)
    return bool(parts) and all(untouched(results, part) for part in parts)


@dataclass
class Flags:
    not_started: dict = field(default_factory=dict)     # name -> "the starter unchanged" | "stubs only"
    identical: list = field(default_factory=list)       # groups of names (sorted), each of two or more
    near_copies: dict = field(default_factory=dict)     # name -> its resemblance.Pair with the reference
    pairs: list = field(default_factory=list)           # every resemblance.Pair of the class, the reference too
    similar: list = field(default_factory=list)         # triage.Clusters of those pairs
    identity: dict = field(default_factory=dict)        # name -> [what is wrong with who it is]
    absent: list = field(default_factory=list)          # roster rows without their submission, as phrases
    ids: str = ""                                       # where the ids came from (roster.Identity.said)

    def of(self, name):
        """The flags of one submission, as short phrases (the CSV's flags column, the class page)."""
        out = []
        if name in self.not_started:
            out.append(f"not started ({self.not_started[name]})")
        same = next((g for g in self.identical if name in g), [])
        if same:
            out.append("identical to " + ", ".join(n for n in same if n != name))
        if name in self.near_copies:
            p = self.near_copies[name]
            out.append(f"near-copy of the solution ({p.norm_a:.0%} of its code normalized, {p.raw_a:.0%} raw)")
        cluster = self.cluster_of(name)
        others = [m for m in cluster.students if m != name and m not in same] if cluster else []
        if others:
            more = f" and {len(others) - NAMED} more" if len(others) > NAMED + 1 else ""
            named = others[:NAMED] if more else others
            out.append(f"similar to {', '.join(named)}{more} (cluster {cluster.number})")
        return out + list(self.identity.get(name, ()))

    def cluster_of(self, name):
        return next((c for c in self.similar if name in c.members), None)


def flags(files, results, identity=None):
    """Flags of a class. files: name -> the bytes of the file graded (None when there was none);
    results: name -> its results.json dict (None when the grader failed on it); identity: the
    class's roster.Identity (its flags, and its rows without a submission), if any."""
    editions = starter_editions()
    out = Flags()
    if identity is not None:
        out.identity, out.ids = {n: list(f) for n, f in identity.flags.items() if f}, identity.said()
        out.absent = [f"{s.id}{f' ({s.name})' if s.name else ''}: {why}" for s, why in identity.absent]
    for name in sorted(files):
        if is_starter(files[name], editions):
            out.not_started[name] = "the starter unchanged"
        elif stubs_only(results.get(name)):
            out.not_started[name] = "stubs only"
    groups = {}
    for name in sorted(files):
        if files[name] is not None and name not in out.not_started:
            groups.setdefault(files[name], []).append(name)
    out.identical = sorted(g for g in groups.values() if len(g) > 1)
    found = profiles({name: data for name, data in files.items() if data is not None and name not in out.not_started})
    for name, profile in found.items():
        pair = resemblance.compare(name, triage.SOLUTION, profile, found[triage.SOLUTION])
        if name != triage.SOLUTION and pair is not None and max(pair.norm_a, pair.raw_a) >= NEAR_COPY:
            out.near_copies[name] = pair
    out.pairs = resemblance.pairs(found)
    out.similar = triage.clusters(out.pairs)
    return out


def profiles(files):
    """name -> the resemblance.Profile of each file (bytes), the starter's k-grams subtracted, and
    the reference's as triage.SOLUTION."""
    boilerplate = resemblance.boilerplate(starter_editions())
    files = {**files, triage.SOLUTION: (paths.SOLUTION / "paged_kv.py").read_bytes()}
    return {name: resemblance.Profile.of(data).minus(boilerplate) for name, data in sorted(files.items())}
