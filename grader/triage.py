"""Similarity as triage, not a list: the pairs of a class (grader/resemblance.py) grouped into
clusters, single linkage above a threshold, so a whole group of near-copies is one line and a copy
between two students is a cluster of its own, not pair 73 behind that group; then the closest pairs
the clusters do not already hold, at most `top` of them, to show how far below the threshold the
rest of the class sits.

The batch (its flags, its summary and class page) and `make similarity` print the same lines.
"""
from dataclasses import dataclass

from grader import resemblance

SOLUTION = "(solution)"     # the reference's name among the class's files
TOP = 10


@dataclass(frozen=True)
class Cluster:
    number: int
    members: tuple          # sorted names, the solution last
    pairs: tuple            # the Pairs between members at or above the threshold, strongest first

    def links(self):
        """Each member's strongest pair inside the cluster, each pair once: at most a line per file,
        however many pairs a large cluster holds."""
        out = []
        for member in self.members:
            best = next(p for p in self.pairs if member in (p.a, p.b))
            if best not in out:
                out.append(best)
        return out

    @property
    def students(self):
        return tuple(m for m in self.members if m != SOLUTION)

    def line(self):
        """One line: the members, then the normalized and raw ranges of the pairs that link them."""
        norm = sorted(p.norm for p in self.pairs)
        raw = sorted(p.raw for p in self.pairs)
        return (f"cluster {self.number}: {', '.join(self.members)} ({len(self.members)} files): normalized "
                f"{_span(norm)}, raw {_span(raw)}")


def _span(values):
    low, high = f"{values[0]:.0%}", f"{values[-1]:.0%}"
    return low if low == high else f"{low}-{high}"


def _key(name):
    return (name == SOLUTION, name)


def clusters(pairs, threshold=resemblance.FLAG):
    """Connected components of the pairs whose score reaches the threshold, strongest cluster first."""
    parent = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    strong = [p for p in pairs if p.score >= threshold]
    for p in strong:
        parent[root(p.a)] = root(p.b)
    groups = {}
    for name in parent:
        groups.setdefault(root(name), set()).add(name)
    made = []
    for members in groups.values():
        inside = sorted((p for p in strong if p.a in members), key=lambda p: (-p.score, p.a, p.b))
        made.append((tuple(sorted(members, key=_key)), tuple(inside)))
    made.sort(key=lambda c: (-c[1][0].score, c[0]))
    return [Cluster(i, members, inside) for i, (members, inside) in enumerate(made, 1)]


def closest_others(pairs, found, top=TOP):
    """The `top` most similar pairs that are not within one cluster, most similar first; a cluster
    counts as one file (its strongest pair with each other file or cluster stands for all)."""
    home = {m: f"cluster {c.number}" for c in found for m in c.members}
    seen, out = set(), []
    for p in sorted(pairs, key=lambda p: (-p.score, p.a, p.b)):
        units = frozenset((home.get(p.a, p.a), home.get(p.b, p.b)))
        if len(units) == 2 and units not in seen:
            seen.add(units)
            out.append(p)
    return out[:top]


def pair_line(p):
    return (f"{p.a} ~ {p.b}: normalized {p.norm:.0%} ({p.norm_a:.0%} of {p.a} is in {p.b}, {p.norm_b:.0%} of {p.b} "
            f"is in {p.a}), raw {p.raw:.0%}")


def lines(pairs, threshold=resemblance.FLAG, top=TOP, detail=None):
    """The triage as text: one line per cluster, then the closest pairs outside them. With
    `detail` (pair -> more words, e.g. another tool's figure), each cluster's links (Cluster.links)
    are listed under it too, and every pair line ends with those words."""
    found = clusters(pairs, threshold)

    def said(p, indent):
        return f"{indent}{pair_line(p)}{detail(p) if detail else ''}"
    out = [f"Similar files (normalized or raw similarity at least {threshold:.0%}, the starter not counted; "
           f"{SOLUTION} is solution/paged_kv.py): {len(found)} cluster{'s' * (len(found) != 1)}"]
    for c in found:
        out += [f"  {c.line()}", *([said(p, "    ") for p in c.links()] if detail else [])]
    out += [] if found else ["  none"]
    others = closest_others(pairs, found, top)
    if others:
        out.append(f"The {len(others)} closest pairs besides (to see how far below the threshold the rest is):")
        out += [said(p, "  ") for p in others]
    return out
