"""Part 2 named where Parts 4-6 depend on it (scenarios.sequence_probe, step_probe; judges.part2_note):
every correct implementation answers both probes as the reference does, so no correct solution is
ever told to fix Part 2; a constructor or a batched step that is wrong is, in the failing check of
another part; a passing case gets no note. And Part 1's probes that put the grader's book of
references in front of a broken pool (refcount_probe, copy_moves_references) see the bugs the
generated corpus found leaking into other parts."""
import os

import pytest

from grader import paths

paths.trusted_imports()

import scenarios  # noqa: E402

from grader.hidden import judges  # noqa: E402
from grader.hidden.conftest import LEDGER  # noqa: E402
from grader.selftest import generate, mutants, owners  # noqa: E402
from grader.selftest.verify_corpus import load, load_reference  # noqa: E402

VARIANTS = sorted(f[:-3] for f in os.listdir(os.path.join(mutants.HERE, "variants")) if f.endswith(".py"))


NAMES = ("PagedSequence.__init__:+1:drop:0", "PagedSequence.__init__:+3:drop:0", "paged_step:+28:index:3",
         "paged_step:+23:index:2", "_slots:+4:index:1", "BlockPool.refcount:+3:drop:0", "BlockPool.__init__:+11:const:0",
         "BlockPool._in_use:+4:index:1", "BlockPool.copy_block:+6:return:0")
_BUILT = {}


def _generated(name):
    """The generated mutant `name` as a module (the corpus is made once per session: it is 600 texts)."""
    if not _BUILT:
        text = mutants.reference_text()
        for m in generate.mutations(text, owners.reference_owner()):
            if m.name in NAMES:
                _BUILT[m.name] = mutants.apply(m, text)
    return load(_BUILT[name], name.replace(":", "_").replace(".", "_").replace("+", ""))


def _probes(pk):
    return {"part2": {"sequence": scenarios.sequence_probe(pk), "step": scenarios.step_probe(pk, ledger=LEDGER)}}


@pytest.fixture(scope="module")
def reference():
    return _probes(load_reference())


def test_the_reference_answers_both_probes(reference):
    assert reference["part2"]["sequence"] is True
    step = reference["part2"]["step"]
    assert isinstance(step, dict) and step["lengths"] == [5 + 2 + 1, 2 + 1, 5 + 2 + 1] and len(step["logits"]) == 5


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_correct_variant_answers_them_as_the_reference_does(reference, variant):
    with open(os.path.join(mutants.HERE, "variants", f"{variant}.py"), encoding="utf-8") as f:
        got = _probes(load(f.read(), variant))
    assert judges.part2_note(reference, got) == ""


@pytest.mark.parametrize("name, probe", [
    ("PagedSequence.__init__:+1:drop:0", "PagedSequence(pool)"),       # no pool attribute
    ("PagedSequence.__init__:+3:drop:0", "PagedSequence(pool)"),       # no length
    ("paged_step:+28:index:3", "paged_step"),                          # a group's logits one row off
    ("paged_step:+23:index:2", "paged_step"),                          # reads the next physical block
    ("_slots:+4:index:1", "paged_step"),                               # positions one block off
])
def test_a_wrong_constructor_or_step_is_named(reference, name, probe):
    note = judges.part2_note(reference, _probes(_generated(name)))
    assert f"your {probe}" in note and "fix Part 2 first" in note


def test_the_note_rides_on_failures_only(reference):
    broken = _probes(_generated("paged_step:+28:index:3"))
    named = judges.naming_part2(lambda case, expected, got, ctx=None: "  after action 1 of 1: differs")
    assert "fix Part 2 first" in named(None, reference, broken)
    assert judges.naming_part2(lambda case, expected, got, ctx=None: None)(None, reference, broken) is None


def test_no_probe_no_note(reference):
    """A pool that cannot be built (Part 1's) gives no probe, and no note naming Part 2."""
    assert judges.part2_note(reference, {"part2": {"sequence": None, "step": None}}) == ""
    assert judges.part2_note({"part2": {}}, _probes(_generated("paged_step:+28:index:3"))) == ""


@pytest.mark.parametrize("name, said", [
    ("BlockPool.refcount:+3:drop:0", {"call": "refcount", "bad_id": True}),     # refcount(5): IndexError
    ("BlockPool.__init__:+11:const:0", {"call": "refcount", "wrong": True}),    # free blocks count 1
    ("BlockPool._in_use:+4:index:1", {"call": "incref", "error": "ValueError"}),  # reads the neighbour's count
])
def test_part1s_reference_book_stands_in_for_counts_a_cache_or_a_fork_reads(name, said):
    """The ledger (working_pool) stands in when refcount_probe finds incref, decref or refcount wrong on
    a pool of its own, free blocks and bad ids included; the reference passes the probe."""
    assert scenarios.refcount_probe(load_reference()) is None
    assert scenarios.refcount_probe(_generated(name)) == said


def test_a_copy_block_that_returns_no_id_puts_the_ledgers_copies_in_front():
    assert not scenarios.copy_moves_references(load_reference())
    assert scenarios.copy_moves_references(_generated("BlockPool.copy_block:+6:return:0"))
