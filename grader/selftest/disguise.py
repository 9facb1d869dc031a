"""Cheap disguises of a copied file, as a student holding a classmate's file (or the grader's source)
would apply them to hide the copy from a similarity check: every one keeps the program's behaviour,
so the copy still scores what the original scores.

    noop_calls(text, every=2)    a call of a do-nothing function after every `every`-th statement of
                                 every function (the file passed through ast: comments gone)
    reverse_definitions(text)    the top-level definitions and each class's methods in reverse order
    rename_identifiers(text)     every local variable, private helper and private attribute renamed
    dead_stores(text, every=2)   an assignment nothing reads after every `every`-th statement
    utf7(text)                   the same text encoded as UTF-7 under a coding line, every line in
                                 UTF-7's base64 (bytes: Python compiles it; a reader that assumes
                                 UTF-8 sees noise)
    combined(text)               all four

checks/test_similarity.py measures each against the normalized similarity (grader/resemblance.py),
and grader/selftest/classfolder.py puts disguised copies into the selftest's class.
"""
import ast
import base64
import hashlib

PAD = "_trace"          # the do-nothing function noop_calls adds


def _unparsed(tree):
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _pad(tree, every, make):
    """Insert make(i) after every `every`-th statement of each statement list inside a function
    (not after a return, raise, continue or break: it would be dead code anyway)."""
    done = set()
    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        for node in ast.walk(function):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt) and id(stmts) not in done:
                    padded = []
                    for i, stmt in enumerate(stmts, 1):
                        padded.append(stmt)
                        if i % every == 0 and not isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                            padded.append(make(i))
                    setattr(node, field, padded)
                    done.add(id(padded))
    return tree


def noop_calls(text, every=2):
    """A call of a function that does nothing after every `every`-th statement of each function body."""
    tree = _pad(ast.parse(text), every, lambda i: ast.Expr(ast.Call(ast.Name(PAD, ast.Load()), [], [])))
    first = next(i for i, s in enumerate(tree.body) if not _is_prelude(s))
    tree.body.insert(first, ast.parse(f"def {PAD}(*args):\n    pass\n").body[0])
    return _unparsed(tree)


def dead_stores(text, every=2):
    """An assignment of a constant to a name nothing reads after every `every`-th statement of each
    function body."""
    return _unparsed(_pad(ast.parse(text), every, lambda i: ast.parse(f"_unused_{i} = {i}").body[0]))


def _is_prelude(stmt):
    """A module docstring or an import: what stays at the top."""
    return isinstance(stmt, (ast.Import, ast.ImportFrom)) or (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str))


def reverse_definitions(text):
    """The top-level functions and classes, and each class's methods, in reverse order; a definition
    that needs another one when it is made (a base class, a decorator, a default) still comes after it."""
    tree = ast.parse(text)
    defs = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    by_name = {d.name: d for d in defs}
    order = []

    def place(d):
        if d not in order:
            for name in sorted(_needed_when_defined(d) & set(by_name) - {d.name}):
                place(by_name[name])
            order.append(d)
    for d in reversed(defs):
        place(d)
    for cls in order:
        if isinstance(cls, ast.ClassDef):
            methods = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            cls.body = [s for s in cls.body if s not in methods] + methods[::-1]
    tree.body = [s for s in tree.body if s not in defs] + order
    return _unparsed(tree)


def _needed_when_defined(node):
    """The names a definition reads when it runs (decorators, bases, defaults, annotations, a class
    body's own statements), not those its functions read when called."""
    found = set()

    def walk(n):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            parts = [*getattr(n, "decorator_list", []), *n.args.defaults, *[d for d in n.args.kw_defaults if d]]
            parts += [a.annotation for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs if a.annotation]
            parts += [n.returns] if getattr(n, "returns", None) else []
            for p in parts:
                walk(p)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            found.add(n.id)
        for child in ast.iter_child_nodes(n):
            walk(child)
    if isinstance(node, ast.ClassDef):
        for part in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords), *node.body]:
            walk(part)
    else:
        walk(node)
    return found


def rename_identifiers(text):
    """Every local variable (a name stored in a function, not one of its parameters), every private
    top-level name and every private attribute (self._x) renamed consistently, to names that look
    written by hand and say nothing of the old ones. Parameters and the contract's names stay:
    callers may pass them by keyword."""
    tree = ast.parse(text)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}

    def fresh(name):
        word = WORDS[hashlib.sha256(name.encode()).digest()[0] % len(WORDS)]
        made = next(f"{word}_{k}" for k in range(len(taken) + 1) if f"{word}_{k}" not in taken)
        taken.add(made)
        return made
    private = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name.startswith("_")}
    private |= {t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets
                if isinstance(t, ast.Name) and t.id.startswith("_")}
    private |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
                and not n.attr.startswith("__")}
    private |= {f.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("_") and not f.name.startswith("__")}
    glob = {name: fresh(name) for name in sorted(private)}

    class Rename(ast.NodeTransformer):
        local = {}

        def visit_FunctionDef(self, node):
            args = node.args
            params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
            params |= {a.arg for a in (args.vararg, args.kwarg) if a}
            declared = {n for s in ast.walk(node) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
            stored = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            outer = self.local
            self.local = {**{k: v for k, v in outer.items() if k not in params},
                          **{n: fresh(n) for n in sorted(stored - params - declared)}}
            node.name = glob.get(node.name, node.name)
            self.generic_visit(node)
            self.local = outer
            return node

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_ClassDef(self, node):
            node.name = glob.get(node.name, node.name)
            self.generic_visit(node)
            return node

        def visit_Name(self, node):
            node.id = self.local.get(node.id, glob.get(node.id, node.id))
            return node

        def visit_Attribute(self, node):
            self.generic_visit(node)
            node.attr = glob.get(node.attr, node.attr)
            return node

    return _unparsed(Rename().visit(tree))


WORDS = ("tmp", "val", "item", "node", "acc", "cur", "ref", "slot", "hold", "part", "data", "res")
CODING_LINE = b"# -*- coding: utf-7 -*-\n"


def utf7(text):
    """The file as UTF-7 under a coding line, every line spelled in UTF-7's base64 (`+AGQAZQBm-`...,
    which UTF-7 allows for any character): Python decodes it, byte-level tools see noise."""
    lines = [base64.b64encode(line.encode("utf-16-be")).rstrip(b"=") for line in text.split("\n")]
    return CODING_LINE + b"\n".join(b"+" + line + b"-" if line else b"" for line in lines)


def combined(text):
    """Every disguise at once: renamed, reversed, a no-op call after every second statement, UTF-7."""
    return utf7(noop_calls(reverse_definitions(rename_identifiers(text)), every=2))


KINDS = {                       # name -> text -> the disguised file's bytes
    "noop every 2nd": (lambda t: noop_calls(t, 2).encode()),
    "noop every 3rd": (lambda t: noop_calls(t, 3).encode()),
    "dead stores every 2nd": (lambda t: dead_stores(t, 2).encode()),
    "reversed": (lambda t: reverse_definitions(t).encode()),
    "renamed": (lambda t: rename_identifiers(t).encode()),
    "utf-7": utf7,
    "renamed + reversed + noop 2nd": (lambda t: noop_calls(reverse_definitions(rename_identifiers(t)), 2).encode()),
    "all, in utf-7": combined,
}
