"""Integrity flags for a graded class: what staff should look at before publishing. None of them
changes a grade; each says what was seen.

- not started: the file is the starter (either edition: with the bonus or without it, as
  tools/build_handout.py writes it), or it was graded and every case of every check it was graded
  on stopped at a TODO of the starter (stubs only).
- identical: files with the same bytes (a zip and a loose file count as the file they hold), in
  groups. Not-started files are left out: two untouched starters are identical by nature.
- near-copy of the solution: most of the file's own code (what is not the starter's) is the
  reference's, token for token, with names and strings ignored, so renamed variables and a new
  header do not hide it. Measured on k-grams of normalized tokens (the MOSS idea, without the
  winnowing a small class does not need); independently written correct files share at most about
  a quarter of their k-grams with the reference (the selftest's variants), a copy shares nearly all.

Pairwise similarity between students is `make similarity` (copydetect, a staff tool).
"""
import io
import keyword
import tokenize
from dataclasses import dataclass, field

from grader import paths

K = 25                      # tokens per k-gram: shorter runs are common Python, not copying
NEAR_COPY = 0.6             # share of a file's own k-grams found in the reference
MIN_GRAMS = 50              # fewer own k-grams than this (a few lines) is too little to judge
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
    return float(test["score"]) == 0 and bool(said) and all(p.startswith(TODO) for p in said)


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


def tokens(source):
    """The file's tokens with every name that is not a keyword as "V", every string as "S", and
    comments and blank lines dropped. A file that stops tokenizing (a syntax error) keeps what came before."""
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(source).readline):
            if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER):
                continue
            if t.type == tokenize.NAME:
                out.append(t.string if keyword.iskeyword(t.string) else "V")
            elif t.type == tokenize.STRING:
                out.append("S")
            else:
                out.append({tokenize.NEWLINE: ";", tokenize.INDENT: "{", tokenize.DEDENT: "}"}.get(t.type, t.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def grams(source):
    t = tokens(source)
    return {tuple(t[i:i + K]) for i in range(len(t) - K + 1)}


def share_of(source, reference_grams, boilerplate_grams):
    """The share of the file's own k-grams (not the starter's) that the reference has; None when the
    file has too little code of its own to judge."""
    own = grams(source) - boilerplate_grams
    if len(own) < MIN_GRAMS:
        return None
    return len(own & reference_grams) / len(own)


@dataclass
class Flags:
    not_started: dict = field(default_factory=dict)     # name -> "the starter unchanged" | "stubs only"
    identical: list = field(default_factory=list)       # groups of names (sorted), each of two or more
    near_copies: dict = field(default_factory=dict)     # name -> share of its own code that is the reference's

    def of(self, name):
        """The flags of one submission, as short phrases (the CSV's flags column, the class page)."""
        out = []
        if name in self.not_started:
            out.append(f"not started ({self.not_started[name]})")
        for group in self.identical:
            if name in group:
                out.append("identical to " + ", ".join(n for n in group if n != name))
        if name in self.near_copies:
            out.append(f"near-copy of the solution ({self.near_copies[name]:.0%} of its code)")
        return out


def flags(files, results):
    """Flags of a class. files: name -> the bytes of the file graded (None when there was none);
    results: name -> its results.json dict (None when the grader failed on it)."""
    editions = starter_editions()
    boilerplate = set().union(*(grams(e.decode()) for e in editions))
    reference = grams((paths.SOLUTION / "paged_kv.py").read_text(encoding="utf-8")) - boilerplate
    out = Flags()
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
    for name in sorted(files):
        if files[name] is None or name in out.not_started:
            continue
        share = share_of(files[name].decode("utf-8", errors="replace"), reference, boilerplate)
        if share is not None and share >= NEAR_COPY:
            out.near_copies[name] = share
    return out
