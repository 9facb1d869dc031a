"""The generated corpus (grader/selftest/generate.py, owners.py) without grading: the mutations of a small
source are exactly the ones worked out by hand below, every mutant of the reference compiles, differs,
is labelled with registered parts and named uniquely and stably, and the labelling rule gives the
reference's written owner map on every line of every function."""
import ast

import pytest

from grader.selftest import generate, mutants, owners

import registry  # noqa: E402    tests/registry.py (mutants put tests/ on sys.path)

ONE = ("allocator",)
SMALL = '''LIMIT = 3


def f(a, b):
    """doc 1 + 2"""
    x = a + 1
    if x < b and not a:
        raise ValueError(f"bad {a - 1}", 3)
    return g(x, b)[a]
'''
# worked out by reading SMALL: per line, in the order of the changed site (a statement's drop first)
SMALL_MUTANTS = [
    ("LIMIT:+0:drop:0", "LIMIT = 3", "pass"),
    ("LIMIT:+0:const:0", "LIMIT = 3", "LIMIT = 4"),
    ("LIMIT:+0:const:1", "LIMIT = 3", "LIMIT = 2"),
    ("f:+2:drop:0", "x = a + 1", "pass"),
    ("f:+2:arith:0", "x = a + 1", "x = a - 1"),
    ("f:+2:const:0", "x = a + 1", "x = a + 2"),
    ("f:+2:const:1", "x = a + 1", "x = a + 0"),
    ("f:+3:cmp:0", "if x < b and not a:", "if x <= b and not a:"),
    ("f:+3:bool:0", "if x < b and not a:", "if x < b or not a:"),
    ("f:+3:not:0", "if x < b and not a:", "if x < b and a:"),
    ("f:+4:drop:0", 'raise ValueError(f"bad {a - 1}", 3)', "pass"),
    ("f:+5:return:0", "return g(x, b)[a]", "return None"),
    ("f:+5:swap:0", "return g(x, b)[a]", "return g(b, x)[a]"),
    ("f:+5:index:0", "return g(x, b)[a]", "return g(x, b)[a + 1]"),
    ("f:+5:index:1", "return g(x, b)[a]", "return g(x, b)[a - 1]"),
]


def test_a_small_source_gets_exactly_the_mutations_worked_out_by_hand():
    got = [(m.name, m.bug) for m in generate.mutations(SMALL, lambda q, line: ONE)]
    assert got == [(n, f"{n.split(':')[2]}: {a}  ->  {b}") for n, a, b in SMALL_MUTANTS]


def test_slices_ranges_min_max_and_literal_indices():
    text = "def h(t, n):\n    return max(t[1:n], t[-1], range(n))\n"
    bugs = {m.bug.split("  ->  ")[1] for m in generate.mutations(text, lambda q, line: ONE)}
    for want in ("return min(t[1:n], t[-1], range(n))", "return max(t[:n], t[-1], range(n))",
                 "return max(t[2:n], t[-1], range(n))", "return max(t[0:n], t[-1], range(n))",
                 "return max(t[1:], t[-1], range(n))", "return max(t[1:n + 1], t[-1], range(n))",
                 "return max(t[1:n], t[0], range(n))", "return max(t[1:n], t[-2], range(n))",
                 "return max(t[1:n], t[-1], range(1, n))", "return max(t[1:n], t[-1], range(n - 1))"):
        assert want in bugs, want


def test_editing_a_function_renames_no_mutant_of_another():
    before = {m.name: m.bug for m in generate.mutations(SMALL, lambda q, line: ONE)}
    edited = SMALL.replace('    x = a + 1\n', '    y = 7\n    x = a + 1\n')
    after = {m.name: m.bug for m in generate.mutations(edited, lambda q, line: ONE)}
    assert {n: b for n, b in after.items() if n.startswith("LIMIT")} == \
        {n: b for n, b in before.items() if n.startswith("LIMIT")}
    assert after["f:+3:drop:0"] == before["f:+2:drop:0"]       # f's own later lines move down one


@pytest.fixture(scope="module")
def reference():
    text = mutants.reference_text()
    return text, generate.mutations(text, owners.reference_owner())


def test_every_mutant_of_the_reference_compiles_differs_and_is_labelled(reference):
    text, ms = reference
    parts = {p.id for p in registry.PARTS}
    assert len(ms) > 300
    assert len({m.name for m in ms}) == len(ms)
    texts = set()
    for m in ms:
        built = mutants.apply(m, text)
        compile(built, m.name, "exec")
        assert built != text
        texts.add(built)
        assert m.parts and set(m.parts) <= parts, m.name
        assert generate.kind_of(m) in generate.KINDS
    assert len(texts) == len(ms)
    assert {generate.kind_of(m) for m in ms} == set(generate.KINDS)
    assert {m.part for m in ms} == parts            # every part's own bugs nobody wrote (unseen.py needs none)


def test_every_equivalent_entry_names_a_mutant_of_the_corpus(reference):
    """equivalent.py excuses by name: a name no mutant has any more (the source changed) must not linger."""
    from grader.selftest import equivalent, unseen
    names = {m.name for m in reference[1]} | {b.name for b in unseen.BUGS}
    assert sorted(set(equivalent.EQUIVALENT) - names) == []


def test_names_are_anchored_on_functions_not_file_lines(reference):
    text, ms = reference
    head = "    def alloc(self):\n"
    edited = text.replace(head, head + "        _probe = 12345\n")
    again = {m.name: (m.bug, m.parts) for m in generate.mutations(edited, owners.Written(edited))}
    outside = [m for m in ms if not m.name.startswith("BlockPool.alloc:")]
    assert [m.name for m in outside if again.get(m.name) != (m.bug, m.parts)] == []
    for m in ms[::25]:           # an anchor names its line, and back
        line = generate.line_of(text, m.name)
        assert generate.anchor(text, line) == ":".join(m.name.split(":")[:2])


def test_the_rule_gives_the_written_owner_map_on_every_line_of_the_reference():
    text = mutants.reference_text()
    written, rule = owners.reference_owner(), owners.Owners(text)
    tree = ast.parse(text)
    covered = 0
    for cls in [None, *[n for n in tree.body if isinstance(n, ast.ClassDef)]]:
        for fn in (cls.body if cls else tree.body):
            if isinstance(fn, ast.FunctionDef):
                q = f"{cls.name}.{fn.name}" if cls else fn.name
                for line in range(fn.lineno, fn.end_lineno + 1):
                    assert written(q, line) == rule(q, line), (q, line)
                covered += 1
    assert covered == len([n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)])


def test_the_written_map_puts_the_lazy_copy_and_the_copied_data_in_part_4_and_the_count_in_part_2():
    text = mutants.reference_text()
    own = owners.reference_owner()
    lines = text.splitlines()
    at = {s.strip(): i + 1 for i, s in enumerate(lines)}
    assert own("PagedSequence.reserve", at["self.pool.decref(shared)"]) == ("copy_on_write",)
    assert own("PagedSequence.reserve", at["need = int(self._needs_copy()) + self._new_blocks(n)"]) == ("paged_step",)
    assert own("_as_int", at["return int(x)"]) == ("allocator", "paged_step", "prefix_cache", "swap")
    assert own("BlockPool.copy_block", at["self.v[:, new] = self.v[:, b]"]) == ("copy_on_write", "allocator")
    assert own("BlockPool.copy_block", at["self.n_copies += 1"]) == ("allocator",)


@pytest.mark.parametrize("variant", ["plain_loops", "batched_dataclass"])
def test_two_variants_are_labelled_by_the_rule(variant):
    text = generate.source_text(variant)
    ms = generate.mutations(text, owners.Owners(text))
    assert len({m.name for m in ms}) == len(ms) > 300
    by = {m.name: m for m in ms}
    cow = [m for m in ms if "copy_block(" in m.bug and m.name.startswith("PagedSequence.reserve")]
    assert cow and all(m.part == "copy_on_write" for m in cow)
    data = [m for m in ms if m.name.startswith("BlockPool.copy_block") and "self.v[" in m.bug]
    assert data and all(m.parts == ("copy_on_write", "allocator") for m in data)
    assert all(by[n].parts == ("allocator",) or n.startswith("BlockPool.copy_block:") and by[n].parts == data[0].parts
               for n in by if n.startswith("BlockPool."))


def test_a_stratified_sample_takes_every_part_and_kind_first(reference):
    from grader.selftest.measure import Entry
    items = [Entry("generated", m, generate.kind_of(m), "") for m in reference[1]]
    strata = {(e.mutant.part, e.kind) for e in items}
    picked = generate.sample(items, len(strata))
    assert {(e.mutant.part, e.kind) for e in picked} == strata
    assert [e.name for e in generate.sample(items, 40)] == [e.name for e in generate.sample(items, 40)]
    parts = {e.mutant.part for e in items}
    assert {e.mutant.part for e in generate.sample(items, len(parts))} == parts     # one of each part first


def test_every_hand_written_mutant_is_anchored_where_generate_anchors_its_line():
    """A hand-written mutant's first edit names the function or class generate.anchor finds for its line."""
    text = mutants.reference_text()
    tree = ast.parse(text)
    for m in mutants.MUTANTS:
        where, find = m.edits[0][:2]
        start = text.index(find, mutants.scopes(text)[where][0])
        line = text[:start].count("\n") + 1
        found = generate.anchor(text, line, tree)
        assert found.split(":")[0] == where and generate.line_of(text, found) == line, (m.name, where, found)


def test_the_quick_mode_judges_the_replays_as_a_grading_does():
    """inprocess.judge_check (generate --mode inprocess, margins, earns) judges paged_step.replays too, the
    runs Parts 4 and 5 compare theirs with: a copy of the reference passes it, a step that reads the
    wrong slot fails it."""
    from grader.selftest import inprocess
    ref = inprocess.load(mutants.REFERENCE, "replays_ref")
    same = inprocess.load(mutants.REFERENCE, "replays_same")
    slots = next(m for m in mutants.MUTANTS if m.name == "slots_swapped")
    wrong = inprocess.load_text(mutants.apply(slots), "replays_wrong")
    assert inprocess.judge_check(same, ref, "paged_step.replays", 0) == [None, None]
    assert all("run 1 of" in m for m in inprocess.judge_check(wrong, ref, "paged_step.replays", 0))


def test_the_second_oracle_runs_on_a_survivor_and_passes_a_copy_of_the_reference():
    """measure._second (generate's verify_corpus on the mutants the grader spares) checks a text: the
    reference's own passes every check and differential run, a key built with / fails them. (Its
    helper was renamed when Part 6 came: every survivor's check then died and read as a kill.)"""
    from grader.selftest import measure
    from grader.selftest import verify_corpus as vc
    ref = vc.load_reference()
    assert measure._second(mutants.reference_text(), "second_copy", ref) == []
    text = mutants.reference_text()
    keys = text.replace("range(len(t) // self.pool.block_size)", "range(len(t) / self.pool.block_size)")
    assert keys != text and any("TypeError" in f for f in measure._second(keys, "second_keys", ref))
