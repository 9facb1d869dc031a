"""Which parts own each line of a paged_kv.py: the labels of the generated corpus (generate.py).

One bug, one charge: a mutant may cost points only in the parts that own its line, its owner first.
For the reference the map is written out (REFERENCE, REFERENCE_BLOCKS; a contract name not listed
there is its registry part's, rule 1 read as plainly as it is written); for any other implementation
(the correct variants) it follows from the contract and the call graph (Owners), and
checks/test_generate.py proves that the rule gives the written map on the reference:

 1. A contract name of tests/registry.py owns its body: a function or method named in a part; a class
    named in a part owns its class body and its methods that are not private (`__init__`,
    `__post_init__`, the properties n_used, n_free, n_cached) unless the registry names them elsewhere.
 2. RUBRIC: PagedSequence.free is Part 4's, though the registry lists it with Part 2's names: the
    rubric grades it in copy_on_write.free.
 3. Copy-on-write: inside a contract function of another part, an `if` whose body calls
    `.copy_block(` (reserve's lazy copy) is Part 4's; so is a statement assigning a name that `if`'s
    test reads, together with its function's part (it also feeds Part 2's count).
 4. The copy's data: the statements of the pool's copy_block that store into its k or v are Part 4's
    and Part 1's (owner Part 4): the rubric grades the copied K/V in copy_on_write.copied_data
    (mutants.py's copy_block_no_v, unseen.owner), while the line is Part 1's code.
 5. A helper (a private function or method, a module-level name, a class the registry does not name)
    is owned by the parts of the lines that use it, transitively: its parts are the union of theirs,
    its owner the part of its first use in the source, or Part 4 when the test of a copy-on-write
    `if` uses it (it is the copy rule). So a shared helper is labelled with every part whose contract
    code calls it: the reference's _as_int with Parts 1, 2, 5 and 6 (Part 1 first), _check_chunk with
    Parts 2 and 5, _needs_copy with Parts 4 and 2.
Import-time code at module level (a print, anything but a definition or an assignment to a name) runs
for every part: every part owns it. A contract function called by another part's (cached_prefill calls paged_step) does not widen its
label: Part 5's checks judge only Part 5's observables, so that is what the cascade measures.
"""
import ast

from grader.selftest import mutants as mutants_mod

import registry  # noqa: E402    tests/registry.py (mutants put tests/ on sys.path)

COW = "copy_on_write"
RUBRIC = {"PagedSequence.free": COW}

_1, _2, _3, _5, _6 = "allocator", "paged_step", "blockwise_attention", "prefix_cache", "swap"
REFERENCE = {
    "_as_int": (_1, _2, _5, _6),
    "BlockPool": (_1,),
    "PagedSequence": (_2,), "PagedSequence.__init__": (_2,), "PagedSequence.reserve": (_2,),
    "PagedSequence.write": (_2,), "PagedSequence.read": (_2,),
    "PagedSequence._new_blocks": (_2,), "_slots": (_2,), "_blocks_needed": (_2,), "paged_step": (_2,),
    "_check_chunk": (_2, _5),
    "PagedSequence._needs_copy": (COW, _2), "PagedSequence.fork": (COW,), "PagedSequence.free": (COW,),
    "blockwise_attention": (_3,),
    "PrefixCache": (_5,), "cached_prefill": (_5,),
}
REFERENCE_BLOCKS = {("PagedSequence.reserve", "if self._needs_copy():"): (COW,),
                    ("BlockPool.copy_block", "self.k[:, new] = self.k[:, b]"): (COW, _1),
                    ("BlockPool.copy_block", "self.v[:, new] = self.v[:, b]"): (COW, _1)}
COPY_BLOCK = "BlockPool.copy_block"
STORAGE = ("k", "v")            # the pool's K/V storage (the contract's attributes)


def _unit(qualname, classes):
    """The top-level function, method or class a qualname lies in (nested functions: their outer one's)."""
    parts = qualname.split(".")
    return ".".join(parts[:2]) if parts[0] in classes and len(parts) > 1 else parts[0]


class Written:
    """The reference's written map as an owner(qualname, line): a class's entry covers its methods."""

    def __init__(self, text, table=REFERENCE, blocks=REFERENCE_BLOCKS):
        tree = ast.parse(text)
        self.classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        self.table, self.regions, self.named = table, [], _named()
        lines = text.splitlines()
        for (qualname, head), parts in blocks.items():
            node = _find_statement(tree, qualname, head, lines)
            self.regions.append((qualname, node.lineno, node.end_lineno, parts))

    def __call__(self, qualname, line):
        unit = _unit(qualname, self.classes)
        for q, lo, hi, parts in self.regions:
            if q == unit and lo <= line <= hi:
                return parts
        if unit in self.table:
            return self.table[unit]
        if unit.split(".")[0] in self.table:
            return self.table[unit.split(".")[0]]
        return (self.named[unit] if unit in self.named else self.named[unit.split(".")[0]],)


def _named():
    """{contract name: its part} as tests/registry.py lists them: a function, method or class named in
    a part owns itself with no entry in REFERENCE (a new part's names need none; its helpers do)."""
    out = {}
    for p in registry.PARTS:
        for n in p.names:
            out.setdefault(n.dotted, p.id)
    return {**out, **RUBRIC}


def _find_statement(tree, qualname, head, lines):
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and lines[node.lineno - 1].strip() == head:
            return node
    raise KeyError(f"{qualname}: no `{head}`")


class Owners:
    """The rule above as an owner(qualname, line) -> (owner part, other parts...) for any implementation;
    `units` lists every function, method, class body and module-level name with its parts."""

    def __init__(self, text):
        tree = ast.parse(text)
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        contract, classes = {}, {}
        for p in registry.PARTS:
            for n in p.names:
                if n.kind == "class":
                    classes[n.dotted] = p.id
                elif n.kind in ("method", "function", "property"):
                    contract[n.dotted] = p.id
        contract.update(RUBRIC)
        self.units, nodes, helpers = {}, {}, {}    # unit -> parts; unit -> its nodes; simple name -> [units]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nodes[node.name] = [node]
                if node.name in contract:
                    self.units[node.name] = (contract[node.name],)
                else:
                    helpers.setdefault(node.name, []).append(node.name)
            elif isinstance(node, ast.ClassDef):
                nodes[node.name] = [n for n in node.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                if node.name in classes:
                    self.units[node.name] = (classes[node.name],)
                else:
                    helpers.setdefault(node.name, []).append(node.name)
                for m in node.body:
                    if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        continue
                    q = f"{node.name}.{m.name}"
                    nodes[q] = [m]
                    private = m.name.startswith("_") and not (m.name.startswith("__") and m.name.endswith("__"))
                    if q in contract:
                        self.units[q] = (contract[q],)
                    elif node.name in classes and not private:
                        self.units[q] = (classes[node.name],)
                    elif node.name not in classes:
                        helpers.setdefault(node.name, []).append(q)     # a helper class's methods: its parts
                    else:
                        helpers.setdefault(m.name, []).append(q)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Name):
                        nodes.setdefault(t.id, []).append(node)
                        helpers.setdefault(t.id, []).append(t.id)
        self.regions = self._cow_regions(nodes) + self._copied_data(nodes)
        self._label_helpers(nodes, helpers)

    def _cow_regions(self, nodes):
        """[(unit, first line, last line, parts, is_test)] of the copy-on-write `if`s and the statements
        assigning what their tests read (rule 3), in contract functions of parts other than Part 1 and 4."""
        out = []
        for unit, parts in self.units.items():
            if parts[0] in ("allocator", COW) or unit not in nodes:
                continue
            for root in nodes[unit]:
                for node in ast.walk(root):
                    if not (isinstance(node, ast.If) and any(
                            isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "copy_block"
                            for stmt in node.body for c in ast.walk(stmt))):
                        continue
                    out.append((unit, node.lineno, node.end_lineno, (COW,), node.test))
                    read = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
                    for stmt in ast.walk(root):
                        if isinstance(stmt, ast.Assign) and stmt.lineno < node.lineno and any(
                                isinstance(t, ast.Name) and t.id in read for t in stmt.targets):
                            out.append((unit, stmt.lineno, stmt.end_lineno, (COW, parts[0]), stmt))
        return out

    def _copied_data(self, nodes):
        """[(unit, first line, last line, parts, statement)] of copy_block's statements storing into the
        pool's k or v (rule 4)."""
        out = []
        for fn in nodes.get(COPY_BLOCK, ()):
            for stmt in fn.body:
                if any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr in STORAGE
                       for node in ast.walk(stmt) if isinstance(node, (ast.Assign, ast.AugAssign))
                       for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                       for t in ast.walk(target)):
                    out.append((COPY_BLOCK, stmt.lineno, stmt.end_lineno, (COW, self.units[COPY_BLOCK][0]), stmt))
        return out

    def _label_helpers(self, nodes, helpers):
        """Rule 5, to a fixed point: each helper unit's parts from the lines that use its name."""
        uses = {}      # helper unit -> [(line, using unit, in a copy-on-write test)]
        for unit, roots in nodes.items():
            for root in roots:
                for node in ast.walk(root):
                    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
                    for h in helpers.get(name, ()):
                        if h != unit:
                            uses.setdefault(h, []).append((node.lineno, unit, self._in_test(unit, node)))
        for h in uses:
            uses[h].sort()
        pending = [h for hs in helpers.values() for h in hs]
        for h in pending:
            self.units.setdefault(h, ())
        changed = True
        while changed:
            changed = False
            for h in pending:
                parts = [p for line, unit, _ in uses.get(h, ()) for p in self.parts_at(unit, line)]
                if not parts:
                    continue
                first = COW if any(test for _, _, test in uses[h]) else parts[0]
                new = (first, *sorted(set(parts) - {first}, key=registry.number))
                if new != self.units[h]:
                    self.units[h], changed = new, True

    def _in_test(self, unit, node):
        return any(u == unit and isinstance(t, ast.AST) and not isinstance(t, ast.stmt) and any(n is node for n in ast.walk(t))
                   for u, _, _, _, t in self.regions)

    def parts_at(self, unit, line):
        for u, lo, hi, parts, _ in self.regions:
            if u == unit and lo <= line <= hi:
                return parts
        return self.units.get(unit, ())

    def __call__(self, qualname, line):
        unit = _unit(qualname, self.classes)
        parts = self.parts_at(unit, line) if unit != "<module>" else tuple(p.id for p in registry.PARTS)
        if not parts:
            raise KeyError(f"{qualname} (line {line}): no part owns it (no contract name, never used by one)")
        return parts


def for_source(text, reference=False):
    """The owner function of a source: the written map for the reference, the rule for any other."""
    return Written(text) if reference else Owners(text)


def reference_owner():
    return Written(mutants_mod.reference_text())
