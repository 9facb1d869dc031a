"""Numeric margins (grader/selftest/margins.py): every correct implementation stays MARGIN (10x) under
each hidden tolerance, so a correct student cannot fail on an unlucky seed. A few seeds here; the
module measures 200 (python -m grader.selftest.margins). In process: the implementations are ours.
"""
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.selftest import inprocess, margins  # noqa: E402

IMPLS = margins.implementations()
PART3 = ["blockwise_attention.boundaries", "blockwise_attention.tables_layers", "blockwise_attention.configs"]
LOGITS = ["paged_step.prefill", "paged_step.chunked_prefill", "paged_step.configs", "copy_on_write.sharing_invariance",
          "prefix_cache.logits"]


@pytest.fixture(scope="module")
def ref():
    return inprocess.load(IMPLS["reference"], "margins_check_ref")


def implementation(name, ref):
    if IMPLS[name] is None:
        return margins.formulation(name)
    return ref if name == "reference" else inprocess.load(IMPLS[name], f"margins_check_{name}")


def assert_wide(report, failed):
    assert not failed, failed[:3]
    assert margins.thin(report) == [], f"within {margins.MARGIN:g}x of the tolerance: {margins.thin(report)}"
    assert report, "no comparison within a tolerance was measured"


@pytest.mark.parametrize("name", sorted(IMPLS))
def test_part3_outputs_stay_10x_under_1e_12(name, ref):
    """Part 3's outputs at seed 0, against the reference (what the judge sees) and attention_core
    (what the contract promises)."""
    assert_wide(*margins.measure(implementation(name, ref), ref, [0], PART3))


@pytest.mark.parametrize("name", ["reference", "log_sum_exp"])
def test_large_scores_stay_10x_under_1e_12_over_20_seeds(name, ref):
    """The large-scores case errs only where two top scores nearly tie, a few seeds in a hundred: before
    its scores were made exact, seed 18 took the reference 4x and a log-sum-exp 4x under 1e-12."""
    assert_wide(*margins.measure(implementation(name, ref), ref, range(20), ["blockwise_attention.tables_layers"]))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, p in IMPLS.items() if p is not None and n != "reference"))
def test_logits_stay_10x_under_1e_10(name, ref):
    """Part 2's logits, Part 4's sharing twin and Part 5's cached prefill at seed 0."""
    pk = implementation(name, ref)
    checks = [c for c in LOGITS if margins.judged_on(IMPLS[name], c)]
    assert_wide(*margins.measure(pk, ref, [0], checks))
