"""How much of one file is in another, measured two ways, with the standard library only:

- raw: the file's tokens as written, every name "V" and every string "S", comments dropped (what
  the integrity flag measured before, and what MOSS and copydetect compare);
- normalized (JPlag's idea: compare what a program does, not how it is spelled): the file read as
  Python reads it (its declared encoding: a UTF-7 copy is the same program), parsed, then
    * docstrings, bare constants and `pass` dropped, dead `if False:` branches removed,
    * functions whose bodies do nothing (pass, a docstring, `return None`) removed, and every call
      of them that is a statement of its own (with arguments that cannot have effects),
    * names made canonical: each function's parameters and locals v0, v1, ... by first use, the
      file's own top-level functions, classes and globals by kind (F, C, G), attributes (methods,
      fields) A; builtins, imported modules (by their real name, not their alias) and their
      attributes kept,
    * the top-level statements and each class's body in a canonical order (sorted by their
      normalized text), so reordering definitions changes nothing,
  then unparsed and tokenized.

Each form is cut into k-grams of K tokens (shorter runs are common Python, not copying); a share is
the part of one file's k-grams, the starter's subtracted, that the other file holds. A file with
fewer than MIN_GRAMS k-grams of its own cannot be judged (None). Calibrated on the selftest's
independently written correct files (checks/test_similarity.py): they stay well under FLAG.
"""
import ast
import builtins
import importlib.util
import io
import keyword
import sys
import tokenize
from dataclasses import dataclass

K = 25                      # tokens per k-gram
MIN_GRAMS = 50              # fewer own k-grams than this (a few lines) is too little to judge
FLAG = 0.6                  # a share from which two files are "similar" (and a file a near-copy of the solution)
BUILTINS = frozenset(dir(builtins))


def source_of(data):
    """The text Python compiles from these bytes: the coding line or BOM decides the encoding, as
    for an import; bytes that do not decode so are read as UTF-8 with replacements."""
    if isinstance(data, str):
        return data
    try:
        return importlib.util.decode_source(data)
    except (SyntaxError, LookupError, UnicodeError, ValueError):
        return data.decode("utf-8", errors="replace")


def tokens(source, names=False):
    """The file's tokens, comments and blank lines dropped, every string "S"; names "V" unless
    `names` (then as written). A file that stops tokenizing keeps what came before."""
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(source).readline):
            if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER):
                continue
            if t.type == tokenize.NAME:
                out.append(t.string if names or keyword.iskeyword(t.string) else "V")
            elif t.type == tokenize.STRING:
                out.append("S")
            else:
                out.append({tokenize.NEWLINE: ";", tokenize.INDENT: "{", tokenize.DEDENT: "}"}.get(t.type, t.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


# ------------------------------------------------------------------------------ normalization
def _is_docstring_like(stmt):
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _does_nothing(function, noops):
    """A function whose body is only docstrings, constants, pass, `return` / `return None`, and
    calls of functions that do nothing."""
    for stmt in function.body:
        if isinstance(stmt, ast.Pass) or _is_docstring_like(stmt):
            continue
        if isinstance(stmt, ast.Return) and (stmt.value is None or (isinstance(stmt.value, ast.Constant)
                                                                    and stmt.value.value is None)):
            continue
        if _noop_call(stmt, noops):
            continue
        return False
    return True


def _pure(node):
    """An expression that cannot have effects: names, constants, attributes, subscripts, arithmetic."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Slice, ast.BinOp,
                              ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple, ast.List, ast.Starred,
                              ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.keyword))
               for n in ast.walk(node))


def _noop_call(stmt, noops):
    """A statement that is only a call of a function that does nothing, with arguments that cannot
    have effects."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    target = call.func.id if isinstance(call.func, ast.Name) else \
        call.func.attr if isinstance(call.func, ast.Attribute) else None
    return target in noops and all(_pure(a) for a in call.args) and all(_pure(k.value) for k in call.keywords)


def _noop_names(tree):
    """Names of the file's functions (and methods) that do nothing, found to a fixed point (a
    function that only calls such functions does nothing too); a name also given to a function
    that does something is not one."""
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    lambdas = {t.id for s in tree.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Lambda)
               and isinstance(s.value.body, ast.Constant) and s.value.body.value is None
               for t in s.targets if isinstance(t, ast.Name)}
    noops = set(lambdas)
    while True:
        found = {f.name for f in functions if _does_nothing(f, noops)} | lambdas
        working = {f.name for f in functions if f.name not in found}
        found -= working
        if found == noops:
            return noops
        noops = found


class _Prune(ast.NodeTransformer):
    """Drop what cannot change a result: docstrings and bare constants, pass, calls of functions
    that do nothing (and their definitions), `if False:` branches, and in a function an assignment
    of an effect-free value to a name nothing reads, or of a name to itself."""

    def __init__(self, noops):
        self.noops = noops
        self.read = None                   # the names the function being pruned reads

    def _inert(self, stmt):
        if isinstance(stmt, ast.Pass) or _is_docstring_like(stmt) or _noop_call(stmt, self.noops):
            return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in self.noops:
            return True
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Lambda):
            return all(isinstance(t, ast.Name) and t.id in self.noops for t in stmt.targets)
        if isinstance(stmt, ast.Assign) and self.read is not None and _pure(stmt.value) and \
                all(isinstance(t, ast.Name) for t in stmt.targets):
            targets = {t.id for t in stmt.targets}
            same = isinstance(stmt.value, ast.Name) and targets == {stmt.value.id}
            return same or not targets & self.read
        return isinstance(stmt, ast.While) and isinstance(stmt.test, ast.Constant) and not stmt.test.value

    def _body(self, stmts, keep_one=True):
        out = []
        for stmt in stmts:
            if self._inert(stmt):
                continue
            if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Constant):
                out += self._body(stmt.body if stmt.test.value else stmt.orelse, keep_one=False)
                continue
            out.append(self.visit(stmt))
        return out or ([ast.Pass()] if keep_one else [])

    def visit_FunctionDef(self, node):
        was = self.read
        self.read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        node = self.generic_visit(node)
        self.read = was
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, field, self._body(stmts, keep_one=field == "body" and not isinstance(node, ast.Module)))
        for handler in getattr(node, "handlers", []):
            handler.body = self._body(handler.body)
        return node


class _Rename(ast.NodeTransformer):
    """Canonical names: per function, parameters and locals v0, v1, ... in order of first use; the
    file's top-level functions F, classes C, other globals G; attributes and methods A; builtins,
    imported modules (their real names) and the attributes of modules kept."""

    def __init__(self, tree):
        self.modules = {}                      # local name -> the module's real name
        self.imported = set()                  # names imported from modules
        self.top = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Import):
                for a in stmt.names:
                    self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(stmt, ast.ImportFrom):
                self.imported |= {a.asname or a.name for a in stmt.names}
                for a in stmt.names:
                    if a.asname:
                        self.modules[a.asname] = a.name
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.top[stmt.name] = "F"
            elif isinstance(stmt, ast.ClassDef):
                self.top[stmt.name] = "C"
            else:
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        self.top.setdefault(node.id, "G")
        self.scopes = []

    def _local(self, name):
        for names, _ in reversed(self.scopes):
            if name in names:
                return names[name]
        return None

    def _name(self, name):
        """A function's own names (what it stores, as Python decides) are its locals, numbered by
        first use; other names are looked up outward, then among the file's and the builtins."""
        for names, own in reversed(self.scopes):
            if name in names:
                return names[name]
            if name in own:
                names[name] = f"v{len(names)}"
                return names[name]
        if self.scopes and name not in self.top and name not in self.modules and name not in self.imported \
                and name not in BUILTINS:
            names = self.scopes[-1][0]
            names[name] = f"v{len(names)}"
            return names[name]
        if name in self.modules:
            return self.modules[name]
        return self.top.get(name, name)

    def visit_Import(self, node):
        for a in node.names:            # an alias is spelling: `import numpy as np` is `import numpy`
            a.asname = None
        return node

    visit_ImportFrom = visit_Import

    def _function(self, node):
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        args = node.args
        for default in args.defaults + [d for d in args.kw_defaults if d]:
            self.visit(default)
        self.scopes.append(({}, _own_names(node)))
        for a in args.posonlyargs + args.args + ([args.vararg] if args.vararg else []) + args.kwonlyargs + \
                ([args.kwarg] if args.kwarg else []):
            a.arg = self._name(a.arg)
            a.annotation = None
        if isinstance(node, ast.Lambda):
            node.body = self.visit(node.body)
        else:
            node.returns = None
            node.body = [self.visit(s) for s in node.body]
        self.scopes.pop()
        return node

    def visit_FunctionDef(self, node):
        node.name = "A" if self._in_class else self.top.get(node.name, "F") if not self.scopes else \
            self._name(node.name)
        was, self._in_class = self._in_class, False
        node = self._function(node)
        self._in_class = was
        return node

    visit_AsyncFunctionDef = visit_FunctionDef
    _in_class = False

    def visit_Lambda(self, node):
        return self._function(node)

    def visit_ClassDef(self, node):
        node.name = self.top.get(node.name, "C") if not self.scopes else self._name(node.name)
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [self.visit(k) for k in node.keywords]
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        was, self._in_class = self._in_class, True
        node.body = [self.visit(s) for s in node.body]
        self._in_class = was
        return node

    def visit_Global(self, node):
        return node

    visit_Nonlocal = visit_Global

    def visit_Name(self, node):
        if self._in_class and not self.scopes and isinstance(node.ctx, ast.Store):
            node.id = "A"                      # a class attribute
        else:
            node.id = self._name(node.id)
        return node

    def visit_Attribute(self, node):
        module = isinstance(node.value, ast.Name) and node.value.id in self.modules and not self._local(node.value.id)
        self.visit(node.value)
        if not module:
            node.attr = "A"
        return node

    def visit_arg(self, node):
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, (str, bytes)):
            node.value = "S"
        return node

    def visit_JoinedStr(self, node):
        return ast.Constant("S")


def _own_names(function):
    """The names a function (or lambda) binds itself: its parameters and what its body stores,
    nested functions' bodies left out, names it declares global or nonlocal left out."""
    args = function.args
    own = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a}
    declared = set()
    todo = list(function.body) if isinstance(function.body, list) else [function.body]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
            todo += node.decorator_list
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared |= set(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            own.add(node.id)
        todo += ast.iter_child_nodes(node)
    return own - declared


def _ordered(tree):
    """Top-level statements (imports first) and each class's body sorted by their normalized text."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body.sort(key=ast.unparse)
    imports = sorted((s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))), key=ast.unparse)
    rest = sorted((s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))), key=ast.unparse)
    tree.body = imports + rest
    return tree


def normalized(source):
    """The normalized text of a file (see the module's docstring); None when it does not parse."""
    try:
        tree = ast.parse(source)
        tree = _Prune(_noop_names(tree)).visit(tree)
        tree = _ordered(_Rename(tree).visit(tree))
        return ast.unparse(ast.fix_missing_locations(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# ------------------------------------------------------------------------------ k-grams and shares
def grams(token_list, k=K):
    return {hash(tuple(token_list[i:i + k])) for i in range(len(token_list) - k + 1)}


@dataclass(frozen=True)
class Profile:
    """A file's k-grams, raw and normalized (a file that does not parse: its raw tokens twice)."""
    raw: frozenset
    norm: frozenset

    @classmethod
    def of(cls, data):
        source = source_of(data)
        raw = tokens(source)
        text = normalized(source)
        return cls(frozenset(grams(raw)), frozenset(grams(tokens(text, names=True)) if text is not None
                                                    else grams(raw)))

    def minus(self, other):
        return Profile(self.raw - other.raw, self.norm - other.norm)


def boilerplate(editions):
    """One Profile holding every k-gram of the given files (the starter's editions)."""
    profiles = [Profile.of(e) for e in editions]
    return Profile(frozenset().union(*(p.raw for p in profiles)), frozenset().union(*(p.norm for p in profiles)))


def share(own, other):
    """The share of `own`'s k-grams found in `other`'s; None when `own` has too few to judge."""
    return len(own & other) / len(own) if len(own) >= MIN_GRAMS else None


@dataclass(frozen=True)
class Pair:
    """Two files and how much of each is in the other: raw and normalized, each way."""
    a: str
    b: str
    raw_a: float          # share of a's raw k-grams found in b
    raw_b: float
    norm_a: float
    norm_b: float

    @property
    def raw(self):
        return max(self.raw_a, self.raw_b)

    @property
    def norm(self):
        return max(self.norm_a, self.norm_b)

    @property
    def score(self):
        """What decides: the larger of the two views, each its larger direction."""
        return max(self.raw, self.norm)


def compare(a, b, pa, pb):
    """The Pair of two named Profiles (the starter already subtracted); None when either file has
    too little code of its own."""
    shares = (share(pa.raw, pb.raw), share(pb.raw, pa.raw), share(pa.norm, pb.norm), share(pb.norm, pa.norm))
    if None in shares[2:]:
        return None
    return Pair(a, b, *(s or 0.0 for s in shares))


def pairs(profiles):
    """Every Pair of a class: profiles maps a name to its Profile (the starter subtracted)."""
    names = sorted(profiles)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair = compare(a, b, profiles[a], profiles[b])
            if pair is not None:
                out.append(pair)
    return out


if __name__ == "__main__":          # the normalized text of a file, to see what is compared
    print(normalized(source_of(open(sys.argv[1], "rb").read())))
