"""An allocator bug is charged to Part 1 only (issue 14's cascade): when the pool's own incref, decref,
refcount or n_free fail their probes, Parts 2, 4 and 5 are judged through the grader's book of
references (grader/hidden/ledger.py), while the ids, the storage and copy_block stay the
submission's. In-process on planted bugs (unseen.py's), and one grading end to end."""
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from grader import paths, rubric

paths.trusted_imports()

import paged_kv as reference  # noqa: E402
import scenarios  # noqa: E402

from grader.hidden import test_copy_on_write, test_paged_step, test_prefix_cache  # noqa: E402
from grader.hidden.conftest import LEDGER, _with_ledger, rng_for  # noqa: E402
from grader.selftest import mutants, unseen  # noqa: E402
from grader.selftest.verify_corpus import load  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUGS = {b.name: b for b in unseen.BUGS}
MODULES = (test_paged_step, test_copy_on_write, test_prefix_cache)


def _bug(*names):
    text = mutants.reference_text()
    for name in names:
        text = mutants.edited(text, (BUGS[name] if name in BUGS else mutants.BY_NAME[name]).edits, name)
    return load(text, "_".join(names))


def _verdict(pk, module, check, i=0):
    """The judge's message for case i of a check, its calls (and second run) made as the grader makes
    them: the expected side on the reference, the answers and the twin on pk."""
    case = module.PLANS[check](rng_for(0, check))[i]
    (name, inputs), = _with_ledger(check, [[case.scenario, case.inputs]])
    expected = scenarios.SCENARIOS[name](reference, **inputs)
    got = scenarios.SCENARIOS[name](pk, **inputs)
    second = None
    if case.second is not None:
        second = [scenarios.SCENARIOS[n](pk, **kw) for n, kw in _with_ledger(check, case.second(expected, got))]
    return module.JUDGES[check](case, expected, got, types.SimpleNamespace(second=second))


@pytest.fixture(scope="module")
def incref_shared():
    return _bug("incref_rejects_shared")


def test_a_pool_that_passes_its_probes_is_used_as_it_is():
    """Never the ledger for a working pool: a correct PagedSequence may touch its own pool's internals."""
    cfg = scenarios.config()
    assert type(scenarios.working_pool(reference, cfg, 8, 4, LEDGER)) is reference.BlockPool
    assert type(scenarios.working_pool(_bug("incref_rejects_shared"), cfg, 8, 4)).__name__ == "BlockPool"


@pytest.mark.parametrize("check", [c for m in (test_copy_on_write, test_prefix_cache) for c in m.PLANS])
def test_parts_4_and_5_do_not_pay_for_an_incref_that_refuses_shared_blocks(incref_shared, check):
    module = next(m for m in MODULES if check in m.PLANS)
    assert _verdict(incref_shared, module, check) is None


def test_part_2_does_not_pay_for_it_either(incref_shared):
    """The test's own pool.incref (a shared last block held by 3) goes through the ledger too."""
    check = "paged_step.exact_count"
    for i in range(len(test_paged_step.PLANS[check](rng_for(0, check)))):
        assert _verdict(incref_shared, test_paged_step, check, i) is None


def test_the_ledger_keeps_the_submissions_copy():
    """copy_block's K/V are Part 4's: behind the ledger, a copy without V still fails Part 4."""
    pk = _bug("incref_rejects_shared", "copy_block_no_v")
    assert _verdict(pk, test_copy_on_write, "copy_on_write.copied_data") is not None


@pytest.mark.slow
def test_an_allocator_bug_costs_only_part_1_points(tmp_path):
    """refcount(0) raising cost Part 4 26-30 points and Part 5 on main before the ledger."""
    sub = tmp_path / "paged_kv.py"
    sub.write_text(mutants.apply(BUGS["refcount_rejects_block0"]))
    out = tmp_path / "results.json"
    subprocess.run([sys.executable, "-m", "grader", str(sub), "--results", str(out)], cwd=REPO, check=True,
                   capture_output=True, timeout=600)
    tests = json.loads(out.read_text())["tests"]
    lost = {p: rubric.part_points(p) - sum(t["score"] for t in tests if p in t["tags"]) for p in rubric.ALL_PARTS}
    assert lost.pop("allocator") > 0
    assert all(v < 1e-9 for v in lost.values()), lost
