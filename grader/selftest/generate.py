"""The generated corpus: every one-line mutation of a paged_kv.py, named and labelled, and the command
that grades it beside the hand-written bugs (measure.py grades, proofs.py judges; the proofs' figures
come from the graded mode, the grader's own command line).

    python -m grader.selftest.generate [--seeds 0-4] [--sample N] [--source solution|variant NAME]
        [--corpus generated,mutants,unseen] [--mode graded|inprocess|both] [--jobs 2] [--json PATH]
        [--findings PATH] [--records PATH] [--names A,B] [--list] [--enforce]

prints per corpus: killed on every seed / on some / on none (survivors, those listed in equivalent.py,
those verify_corpus catches), the cascade (overall, within Parts 1-4, into the bonus, named by "fix
Part N first"), the public tests as oracle, the seed spread and the "got NoneType" messages; --json
keeps every record, --findings the lists alone. The whole reference corpus on 5 seeds takes about an
hour on two cores; --sample N is a stratified sample (by part and operator kind) for a quick run.

The hand-written corpora (mutants.py, unseen.py) are bugs this project thought of; a grader tuned on
them can still fall short on bugs nobody wrote. So every site of the source gets each mutation below,
one at a time: the node's bytes replaced (positions from `ast`), the rest of the file byte-identical.

    arith   + <-> -, * -> /, / -> * and //, // -> / and *, % -> //, ** -> * (also in +=, -=, ...)
    cmp     < <=, > >=, == !=, is / is not, in / not in (each operator of a chain on its own)
    bool    and <-> or          not     a `not` dropped          neg     a unary minus dropped
    const   an int k -> k + 1, k - 1 (0 <-> 1 among them); True <-> False; None left alone
    slice   a bound dropped, or shifted by +-1          index   an index i -> i + 1, i - 1 (-1 -> 0)
    swap    two adjacent positional arguments of a call
    drop    an expression statement, assignment, augmented assignment, raise or del -> `pass`
    return  `return X` -> `return None`     maxmin  max <-> min      range   range(a, b)'s bounds +-1
Never mutated: docstrings, strings and f-strings (error wording is not graded), a raise's arguments,
annotations, imports (the re-export line). A mutant that does not compile or equals the source (or
an earlier mutant) is skipped. The order is the source's, so the corpus is deterministic.

Names are anchored on the enclosing function or class, not on the file's line numbers:
`PagedSequence.reserve:+4:cmp:0` is the first comparison mutant on the 4th line after reserve's `def`,
so editing another function renames none of these (anchor() and line_of() turn a line into an anchor
and back: a hand-written mutant can be anchored the same way). Each mutant is a mutants.Mutant whose
one edit is the smallest window of whole lines around the change that occurs once in its source, so
`mutants.apply(m, source)` builds it, as for the hand-written ones. Its part and `also` are the parts
owning its line (owners.py).
"""
import ast
import os
import re
import sys
from collections import Counter

from grader.selftest import mutants as mutants_mod

KINDS = ("arith", "cmp", "bool", "not", "neg", "const", "slice", "index", "swap", "drop", "return", "maxmin",
         "range")

_ARITH = {ast.Add: ("-",), ast.Sub: ("+",), ast.Mult: ("/",), ast.Div: ("*", "//"), ast.FloorDiv: ("/", "*"),
          ast.Mod: ("//",), ast.Pow: ("*",)}
_ARITH_TOKEN = re.compile(r"\*\*=?|//=?|[-+*/%@&|^]=?|<<=?|>>=?")
_CMP = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==", ast.Is: "is not",
        ast.IsNot: "is", ast.In: "not in", ast.NotIn: "in"}
_CMP_TOKEN = re.compile(r"not\s+in\b|is\s+not\b|<=|>=|==|!=|<|>|\bin\b|\bis\b")
_BOOL_TOKEN = re.compile(r"\band\b|\bor\b")
_DROPPED = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Delete)
_TIGHT = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.UnaryOp, ast.List, ast.Tuple)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class _Source:
    """A text as UTF-8 bytes, with ast's (line, byte column) positions turned into offsets."""

    def __init__(self, text):
        self.data = text.encode("utf-8")
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def start(self, node):
        return self.starts[node.lineno - 1] + node.col_offset

    def end(self, node):
        return self.starts[node.end_lineno - 1] + node.end_col_offset

    def seg(self, node):
        return self.data[self.start(node):self.end(node)].decode("utf-8")

    def line(self, offset):
        """The 1-based line of a byte offset."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi - 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.starts[mid] <= offset else (lo, mid)
        return lo + 1

    def token(self, a, b, pattern):
        """(start, end) of the operator token between offsets a and b (code only, comments skipped)."""
        gap = self.data[a:b].decode("utf-8")
        code = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), gap)
        m = pattern.search(code)
        if m is None:
            return None
        return a + len(code[:m.start()].encode()), a + len(code[:m.end()].encode())


# ------------------------------------------------------------------------------------------ anchors
def _scopes(tree):
    """[(first line, last line, qualname, def line)] of every function and class, outermost first."""
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                name = f"{prefix}{child.name}"
                first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                out.append((first, child.end_lineno, name, child.lineno))
                walk(child, name + ".")
            else:
                walk(child, prefix)
    walk(tree, "")
    return out


def _module_names(tree):
    """{line: name} of the module-level assignments to one name (their anchor)."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                for line in range(node.lineno, node.end_lineno + 1):
                    out[line] = targets[0].id
    return out


def anchor(text, line, tree=None, scopes=None):
    """`Qualname:+k`: line `line` of `text` as the k-th line after the `def` (or `class`) line of its
    innermost function or class (negative on a decorator); at module level the assigned name's, else
    `<module>:+line` (the only anchor a change elsewhere can move). tree, scopes: already made."""
    tree = tree or ast.parse(text)
    inner = [s for s in (scopes or _scopes(tree)) if s[0] <= line <= s[1]]
    if inner:
        _, _, name, at = inner[-1]
        return f"{name}:{line - at:+d}"
    names = _module_names(tree)
    if line in names:
        first = min(k for k, v in names.items() if v == names[line])
        return f"{names[line]}:{line - first:+d}"
    return f"<module>:{line:+d}"


def line_of(text, where):
    """The line an anchor (`Qualname:+k`, anything after it ignored) names in `text`; KeyError if none."""
    name, off = where.split(":")[:2]
    tree = ast.parse(text)
    if name == "<module>":
        return int(off)
    for _, _, qual, at in _scopes(tree):
        if qual == name:
            return at + int(off)
    for line, assigned in sorted(_module_names(tree).items()):
        if assigned == name:
            return line + int(off)
    raise KeyError(f"no function, class or module-level name {name!r}")


# ------------------------------------------------------------------------------------------ sites
def _skipped(tree):
    """ids of the nodes never mutated: docstrings, strings, f-strings, raise arguments, annotations, imports."""
    skip = set()

    def cover(node):
        skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.JoinedStr, ast.Import, ast.ImportFrom)):
            cover(node)
        elif isinstance(node, ast.Raise):
            for part in (node.exc, node.cause):
                if part is not None:
                    cover(part)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            skip.add(id(node))
        elif isinstance(node, ast.AnnAssign):
            cover(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            cover(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            cover(node.returns)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                cover(first)
    return skip


def _int_literal(node):
    """The value of an int literal (`-3` included), else None; bools are not ints here."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _int_literal(node.operand) is not None:
        return -node.operand.value
    return None


def _shifted(src, node, d):
    """The text of `node` plus d (an int literal becomes the new literal)."""
    k = _int_literal(node)
    if k is not None:
        return str(k + d)
    text = src.seg(node)
    if not (isinstance(node, _TIGHT) or isinstance(node, ast.BinOp) and type(node.op) in _ARITH):
        text = f"({text})"
    return f"{text} {'+' if d > 0 else '-'} {abs(d)}"


def _sites(src, tree):
    """Every candidate edit: (start, end, replacement, kind), in no particular order."""
    skip = _skipped(tree)
    out = []
    literal_done = set()      # int literals already mutated as an index, slice bound or range bound

    def add(kind, a, b, text):
        out.append((a, b, text, kind))

    def shift(kind, node):
        if _int_literal(node) is not None:
            literal_done.update(id(n) for n in ast.walk(node))
        for d in (1, -1):
            add(kind, src.start(node), src.end(node), _shifted(src, node, d))

    def operator(kind, left, right, pattern, new):
        span = src.token(src.end(left), src.start(right), pattern)
        if span is not None:
            add(kind, *span, new)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            for new in _ARITH[type(node.op)]:
                operator("arith", node.left, node.right, _ARITH_TOKEN, new)
        elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH:
            for new in _ARITH[type(node.op)]:
                operator("arith", node.target, node.value, _ARITH_TOKEN, new + "=")
        elif isinstance(node, ast.Compare):
            for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators):
                operator("cmp", left, right, _CMP_TOKEN, _CMP[type(op)])
        elif isinstance(node, ast.BoolOp):
            new = "or" if isinstance(node.op, ast.And) else "and"
            for left, right in zip(node.values, node.values[1:]):
                operator("bool", left, right, _BOOL_TOKEN, new)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)) and _int_literal(node) is None:
            kind, a = ("not", src.start(node) + 3) if isinstance(node.op, ast.Not) else ("neg", src.start(node) + 1)
            while src.data[a:a + 1] in (b" ", b"\t"):
                a += 1
            add(kind, src.start(node), a, "")
        elif isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(index, ast.Slice):
                for bound in (index.lower, index.upper):
                    if bound is not None and id(bound) not in skip:
                        add("slice", src.start(bound), src.end(bound), "")
                        shift("slice", bound)
            else:
                for element in index.elts if isinstance(index, ast.Tuple) else [index]:
                    if not isinstance(element, (ast.Slice, ast.Starred)) and id(element) not in skip and not (
                            isinstance(element, ast.Constant) and element.value in (None, Ellipsis)):
                        shift("index", element)
        elif isinstance(node, ast.Call):
            args = node.args
            for a, b in zip(args, args[1:]):
                if not any(isinstance(x, ast.Starred) or id(x) in skip for x in (a, b)) and src.seg(a) != src.seg(b):
                    between = src.data[src.end(a):src.start(b)].decode("utf-8")
                    add("swap", src.start(a), src.end(b), src.seg(b) + between + src.seg(a))
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in ("max", "min"):
                add("maxmin", src.end(func) - 3, src.end(func), "min" if name == "max" else "max")
            if isinstance(func, ast.Name) and name == "range" and 1 <= len(args) <= 2 and not node.keywords:
                for a in args:
                    shift("range", a)
                if len(args) == 1:
                    add("range", src.start(args[0]), src.start(args[0]), "1, ")
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            add("const", src.start(node), src.end(node), str(not node.value))
        elif isinstance(node, _DROPPED) and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            add("drop", src.start(node), src.end(node), "pass")
        elif isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            add("return", src.start(node.value), src.end(node.value), "None")
    for node in ast.walk(tree):       # the remaining int literals (after the positions that took theirs)
        if id(node) in skip or id(node) in literal_done or _int_literal(node) is None:
            continue
        if isinstance(node, ast.UnaryOp):
            literal_done.add(id(node.operand))
        for d in (1, -1):
            add("const", src.start(node), src.end(node), _shifted(src, node, d))
    return out


def _window(src, a, b, new):
    """(find, replace): the smallest run of whole lines around bytes a..b that occurs once in the
    source, and the same lines with a..b replaced by `new`."""
    data = src.data
    lo, hi = src.line(a) - 1, src.line(max(a, b - 1))      # 0-based first line, exclusive last line
    while True:
        find = data[src.starts[lo]:src.starts[hi]]
        if data.count(find) == 1 or (lo == 0 and hi == len(src.starts) - 1):
            break
        if lo > 0 and (hi - lo) % 2 == 0 or hi == len(src.starts) - 1:
            lo -= 1
        else:
            hi += 1
    replace = data[src.starts[lo]:a] + new.encode("utf-8") + data[b:src.starts[hi]]
    return find.decode("utf-8"), replace.decode("utf-8")


def _changed_lines(src, a, b, new):
    """(the source's lines a..b lie on, the same lines mutated), each stripped and joined."""
    first, last = src.starts[src.line(a) - 1], src.starts[src.line(max(a, b - 1))]
    before = src.data[first:last].decode("utf-8")
    after = (src.data[first:a] + new.encode("utf-8") + src.data[b:last]).decode("utf-8")
    return " ".join(x.strip() for x in before.splitlines()), " ".join(x.strip() for x in after.splitlines())


def mutations(text, owner):
    """Every one-site mutation of `text` as a mutants.Mutant: name `Qual:+k:KIND:i`, part and also from
    owner(qualname, line) (a tuple of parts, its own first; owners.py), bug = "KIND: before -> after",
    one edit (mutants.apply builds it). Skipped: no change, no compile, a text an earlier one made."""
    src = _Source(text)
    tree = ast.parse(text)
    scopes = _scopes(tree)
    seen, counters, out = {text}, Counter(), []
    order = sorted(enumerate(_sites(src, tree)), key=lambda s: (s[1][0], KINDS.index(s[1][3]), s[0]))
    for a, b, new, kind in (site for _, site in order):
        mutated = (src.data[:a] + new.encode("utf-8") + src.data[b:]).decode("utf-8")
        if mutated in seen:
            continue
        seen.add(mutated)
        try:
            compile(mutated, "paged_kv.py", "exec")
        except SyntaxError:
            continue
        line = src.line(a)
        where = anchor(text, line, tree, scopes)
        inner = [s for s in scopes if s[0] <= line <= s[1]]
        parts = tuple(owner(inner[-1][2] if inner else where.split(":")[0], line))
        name = f"{where}:{kind}:{counters[where, kind]}"
        counters[where, kind] += 1
        before, after = _changed_lines(src, a, b, new)
        find, replace = _window(src, a, b, new)
        out.append(mutants_mod.Mutant(name, parts[0], f"{kind}: {before}  ->  {after}",
                                      ((mutants_mod.anchor_of(text, find), find, replace),), also=parts[1:]))
    return out


def kind_of(mutant):
    """A generated mutant's operator kind, from its name."""
    return mutant.name.rsplit(":", 2)[1]


# ------------------------------------------------------------------------------------------ the corpora
def source_text(variant=None):
    """The reference's text, or a correct variant's (selftest/variants/NAME.py)."""
    if variant is None:
        return mutants_mod.reference_text()
    with open(os.path.join(mutants_mod.HERE, "variants", f"{variant}.py"), encoding="utf-8") as f:
        return f.read()


def entries(corpora, variant=None):
    """[measure.Entry] of the corpora named (generated, mutants, unseen; the hand-written two exist for
    the reference only), each corpus in its order."""
    from grader.selftest import owners, unseen
    from grader.selftest.measure import Entry
    text = source_text(variant)
    out = []
    if "generated" in corpora:
        owner = owners.for_source(text, reference=variant is None)
        out += [Entry("generated", m, kind_of(m), mutants_mod.apply(m, text)) for m in mutations(text, owner)]
    if variant is None and "mutants" in corpora:
        out += [Entry("mutants", m, "hand", mutants_mod.apply(m)) for m in mutants_mod.MUTANTS]
    if variant is None and "unseen" in corpora:
        out += [Entry("unseen", m, "hand", mutants_mod.apply(m)) for m in
                (mutants_mod.Mutant(b.name, b.part, b.what, b.edits, also=b.also) for b in unseen.BUGS)]
    return out


def sample(items, n):
    """A deterministic sample of n items of one corpus, stratified by part and operator kind: the
    strata in turn, one of each part in each round (each part's kinds in an order of its own), each
    stratum taken in a low-discrepancy order (golden-ratio steps), so any n spreads over the parts."""
    strata = {}
    for e in items:
        strata.setdefault((e.mutant.part, e.kind), []).append(e)
    parts = sorted({p for p, _ in strata})

    def turn(key):
        part, kind = key
        mine = sorted((k for p, k in strata if p == part),
                      key=lambda k: (KINDS.index(k) + 5 * parts.index(part)) % len(KINDS) if k in KINDS else len(KINDS))
        return mine.index(kind), parts.index(part)
    queues = [[strata[key][i] for i in sorted(range(len(strata[key])), key=lambda i: (i * 0.6180339887498949) % 1.0)]
              for key in sorted(strata, key=turn)]
    picked = set()
    while len(picked) < min(n, len(items)):
        for q in queues:
            if q and len(picked) < n:
                picked.add(q.pop(0).name)
    return [e for e in items if e.name in picked]


def _seeds(text):
    out = []
    for piece in text.split(","):
        lo, _, hi = piece.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _arguments(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,7")
    ap.add_argument("--sample", type=int, help="a stratified sample of N mutants of each corpus (make check's)")
    ap.add_argument("--source", nargs="+", default=["solution"], metavar="solution|variant NAME")
    ap.add_argument("--corpus", default="generated,mutants,unseen", help="of generated, mutants, unseen")
    ap.add_argument("--mode", choices=("graded", "inprocess", "both"), default="graded",
                    help="graded: the grader's command line (the proofs'); inprocess: quick; both: their agreement")
    ap.add_argument("--names", help="only these mutants (comma-separated)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write the records, summaries and timings here")
    ap.add_argument("--findings", help="write the summaries alone here (the lists that drive the grader's fixes)")
    ap.add_argument("--records", help="no grading: summarize the records of an earlier --json again (with today's "
                    "labels and EQUIVALENT, and verify_corpus on the survivors that lack it; give its --source)")
    ap.add_argument("--list", action="store_true", help="list the corpus (name, parts, bug) and stop")
    ap.add_argument("--enforce", action="store_true", help="exit 1 when a proof fails on a graded corpus: a mutant "
                    "not killed on every seed (but equivalent.py's), an oracle pair, an unnamed cascade, a spread "
                    "over 2 points, a 'got NoneType' (make check's sample)")
    args = ap.parse_args(argv)
    args.variant = None
    if args.source[0] == "variant" and len(args.source) == 2:
        args.variant = args.source[1]
    elif args.source != ["solution"]:
        ap.error("--source solution or --source variant NAME")
    return args


def main(argv=None):
    import json

    from grader.selftest import equivalent, measure, proofs
    args = _arguments(argv)
    corpora = args.corpus.split(",")
    items = entries(corpora, args.variant)
    if args.names:
        items = [e for e in items if e.name in args.names.split(",")]
    if args.sample:
        items = [e for c in corpora for e in sample([x for x in items if x.corpus == c], args.sample)]
    if args.list:
        for e in items:
            print(f"{e.corpus:9s} {e.name:44s} {'+'.join(e.mutant.parts):42s} {e.mutant.bug}")
        print(f"{len(items)} mutants")
        return 0
    src_name = args.variant or "solution"
    if args.records:
        with open(args.records) as f:
            out = json.load(f)
        graded = {mode: [r for c in out["corpora"].values() for r in c.get(mode, {}).get("records", [])]
                  for mode in ("graded", "inprocess")}
        graded = {mode: records for mode, records in graded.items() if records}
    else:
        out = {"source": src_name, "seeds": _seeds(args.seeds), "timing": {}}
        graded = {}
        for mode in (("graded", "inprocess") if args.mode == "both" else (args.mode,)):
            graded[mode], out["timing"][mode] = measure.run(items, source_text(args.variant), out["seeds"],
                                                            args.jobs, mode)
    by_name = {e.name: e for e in items}
    for mode, records in graded.items():
        for r in records:               # today's labels (names are stable; owners.py may have changed)
            if r["name"] in by_name:
                m = by_name[r["name"]].mutant
                r["part"], r["parts"], r["bug"] = m.part, list(m.parts), m.bug
        todo = [by_name[r["name"]] for r in records if proofs.spared(r) and not isinstance(r.get("second_oracle"), list)
                and r["name"] in by_name]     # (not yet run, or its child died: again)
        found = measure.second_oracle(todo, args.jobs) if todo else {}
        for r in records:
            r["second_oracle"] = found.get(r["name"], r.get("second_oracle"))
    numbers = {p.id: p.number for p in mutants_mod.registry.PARTS}
    bonus = {p.id for p in mutants_mod.registry.bonus()}
    table = equivalent.for_source(out["source"])
    out["corpora"] = {}
    for mode, records in graded.items():
        for corpus in dict.fromkeys(r["corpus"] for r in records):
            mine = [r for r in records if r["corpus"] == corpus]
            s = proofs.summary(mine, numbers, bonus, table)
            out["corpora"].setdefault(corpus, {})[mode] = {"summary": s, "records": mine}
            print(proofs.render(f"{corpus} ({out['source']}, seeds {out['seeds']}, {mode})", s))
    for mode, t in out["timing"].items():
        if not all(isinstance(v, dict) and "runs" in v for v in t.values()):
            continue                # an older record's timing
        print(f"timing ({mode}): " + "; ".join(f"{k} {v['wall_s']:.0f} s wall, {v['cpu_s']:.0f} s CPU for {v['runs']} "
                                               f"({v['cpu_s'] / max(1, v['runs']):.2f} CPU-s, "
                                               f"{v['wall_s'] / max(1, v['runs']):.2f} s wall each)"
                                               for k, v in t.items()))
    if len(graded) == 2:
        out["agreement"] = agreement(out["corpora"])
        print(f"agreement of inprocess with graded: {out['agreement']['text']}")
    for path, what in ((args.json, out), (args.findings, _findings(out))):
        if path:
            with open(path, "w") as f:
                json.dump(what, f, indent=1)
    if args.enforce:
        broken = [line for mode, records in graded.items() if mode == "graded"
                  for line in proofs.violations(records, numbers, table)]
        for line in broken:
            print(f"PROOF FAILED {line}")
        print(f"proofs: {len(broken)} violations on {len(items)} mutants, seeds {out['seeds']}")
        return 1 if broken or "graded" not in graded else 0
    return 0


def _findings(out):
    """The summaries without the records: what a grader fix starts from."""
    return {"source": out["source"], "seeds": out["seeds"], "timing": out["timing"],
            "corpora": {c: {mode: v["summary"] for mode, v in modes.items()} for c, modes in out["corpora"].items()}}


def agreement(corpora):
    """How often the in-process mode's points lost per part and seed equal the graded mode's (0.01)."""
    same = total = 0
    differ = []
    for modes in corpora.values():
        if not {"graded", "inprocess"} <= set(modes):
            continue
        quick = {r["name"]: r for r in modes["inprocess"]["records"]}
        for r in modes["graded"]["records"]:
            for seed, v in r["seeds"].items():
                w = quick[r["name"]]["seeds"].get(seed, {})
                if v.get("lost") is None or w.get("lost") is None:
                    continue
                total += 1
                if all(abs(v["lost"][p] - w["lost"].get(p, 0.0)) < 0.011 for p in v["lost"]):
                    same += 1
                else:
                    differ.append({"name": r["name"], "seed": seed, "graded": v["lost"], "inprocess": w["lost"]})
    return {"same": same, "of": total, "differ": differ,
            "text": f"{same}/{total} (mutant, seed) pairs lose the same points in every part"}


if __name__ == "__main__":
    sys.exit(main())
