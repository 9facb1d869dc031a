"""No excuse is a pass (issue 14): the judges of Parts 1-4 never ask how another part fares, the
drivers are judged on the pool whatever Part 2's logits, and a case another part makes impossible to
observe fails with that part named. In-process, on the reference and small planted bugs; the graded
pairs (bug + sacrifice) are the selftest's strategic corpus (grader/selftest/strategic.py)."""
import copy
import types

import numpy as np
import pytest

from grader import paths

paths.trusted_imports()

import paged_kv as reference  # noqa: E402
import scenarios  # noqa: E402

from grader.hidden import test_allocator, test_blockwise_attention, test_copy_on_write, test_paged_step  # noqa: E402
from grader.hidden.conftest import rng_for  # noqa: E402
from grader.selftest.verify_corpus import load  # noqa: E402  (a paged_kv.py text as a fresh module)

MODULES = (test_allocator, test_paged_step, test_blockwise_attention, test_copy_on_write)


class Context:
    """What the grader gives a judge: the case's second run (its twin), here computed on the
    reference, and nothing about how other checks fare (a judge that asked would raise here)."""

    def __init__(self, case=None, expected=None):
        self.second = None if case is None or case.second is None else \
            [scenarios.SCENARIOS[name](reference, **inputs) for name, inputs in case.second(expected, expected)]


def _case(module, check, seed=0, i=0):
    return module.PLANS[check](rng_for(seed, check))[i]


def _fake(**overrides):
    """The reference with some of its names replaced, as the scenarios see an implementation."""
    names = ("BlockPool", "PagedSequence", "paged_step", "blockwise_attention", "parallel_sample", "beam_search")
    return types.SimpleNamespace(**{**{n: getattr(reference, n) for n in names}, **overrides})


def _checks():
    """Every check of Parts 1-4 whose cases are scenario calls (paged_step.replays' are other checks'
    second runs: tested below)."""
    for m in MODULES:
        yield from (c for c, plan in m.PLANS.items() if not any(case.scenario == "replays" for case in plan(rng_for(0, c))))


def test_replays_judge_the_reference_against_itself_as_a_pass():
    """paged_step.replays judges the runs other checks compare with: the reference's own answers pass."""
    judge = test_paged_step.JUDGES["paged_step.replays"]
    for case in test_paged_step.PLANS["paged_step.replays"](rng_for(0, "paged_step.replays")):
        module = next(m for m in (test_copy_on_write, *MODULES) if case.inputs["of"] in m.PLANS) \
            if case.inputs["of"].startswith("copy_on_write") else None
        if module is None:
            continue            # (Part 5's: the bonus module, graded end to end)
        calls = [c for x in module.PLANS[case.inputs["of"]](rng_for(0, case.inputs["of"])) if x.second
                 for c in x.second(None, None)]
        answers = [scenarios.SCENARIOS[name](reference, **inputs) for name, inputs in calls]
        assert judge(case._replace(inputs={**case.inputs, "calls": calls}), answers, copy.deepcopy(answers)) is None


@pytest.mark.parametrize("check", list(_checks()))
def test_no_judge_of_parts_1_to_4_asks_how_another_part_fares(check):
    """Every check of Parts 1-4 judges the reference's answer against itself from its own answers only:
    a verdict that cannot be bought by failing another check."""
    module = next(m for m in MODULES if check in m.PLANS)
    judge = module.JUDGES[check]
    case = _case(module, check)
    expected = scenarios.SCENARIOS[case.scenario](reference, **case.inputs)
    assert judge(case, expected, copy.deepcopy(expected), Context(case, expected)) is None


def _logits_off(params, cfg, seqs, chunks):
    return [o + 1e-3 for o in reference.paged_step(params, cfg, seqs, chunks)]


@pytest.mark.parametrize("check", ["copy_on_write.parallel_sampling", "copy_on_write.beam_search"])
def test_the_drivers_judge_the_pool_whatever_the_logits(check):
    """A paged_step whose logits are off (Part 2's) changes nothing the drivers judge: the test chooses
    the tokens and scores, so the same forks, copies and frees happen, and the case passes on its pool."""
    judge = test_copy_on_write.JUDGES[check]
    for i in range(3):
        case = _case(test_copy_on_write, check, i=i)
        expected = scenarios.SCENARIOS[case.scenario](reference, **case.inputs)
        got = scenarios.SCENARIOS[case.scenario](_fake(paged_step=_logits_off), **case.inputs)
        assert judge(case, expected, got, Context()) is None


@pytest.mark.parametrize("check", ["copy_on_write.parallel_sampling", "copy_on_write.beam_search"])
def test_a_driver_whose_paged_step_raises_changes_nothing(check):
    """The drivers' steps are the test's own (your reserve, the test's K/V): a paged_step that raises,
    Part 2's, changes nothing Part 4's drivers judge (isolation by construction)."""
    def raises(params, cfg, seqs, chunks):
        raise IndexError("a broken paged_step")
    case = _case(test_copy_on_write, check)
    expected = scenarios.SCENARIOS[case.scenario](reference, **case.inputs)
    got = scenarios.SCENARIOS[case.scenario](_fake(paged_step=raises), **case.inputs)
    assert test_copy_on_write.JUDGES[check](case, expected, got, Context()) is None


class _NoCopy(reference.BlockPool):
    def copy_block(self, b):
        raise ValueError("copy_block is broken")


@pytest.mark.parametrize("check", ["copy_on_write.parallel_sampling", "copy_on_write.beam_search"])
def test_a_driver_whose_step_raises_because_copy_block_raises_names_part_1(check):
    """A fork's step copies shared blocks: when the step (your reserve) raised and copy_block raises on
    a pool of its own, the case fails naming Part 1 (pool.copy_block), not Part 2."""
    case = _case(test_copy_on_write, check)
    expected = scenarios.SCENARIOS[case.scenario](reference, **case.inputs)
    got = scenarios.SCENARIOS[case.scenario](_fake(BlockPool=_NoCopy), **case.inputs)
    message = test_copy_on_write.JUDGES[check](case, expected, got, Context())
    assert message and "your reserve raised" in message and "fix Part 1 first" in message, message
    assert "Part 2" not in message, message


def test_a_driver_whose_fork_raises_fails_as_its_own():
    class NoFork(reference.PagedSequence):
        def fork(self):
            raise AttributeError("fork")
    case = _case(test_copy_on_write, "copy_on_write.parallel_sampling")
    expected = scenarios.sampling(reference, **case.inputs)
    got = scenarios.sampling(_fake(PagedSequence=NoFork), **case.inputs)
    message = test_copy_on_write.JUDGES["copy_on_write.parallel_sampling"](case, expected, got, Context())
    assert message and "the driver raised" in message and "Part 2" not in message, message


def _copy_case():
    """An exact_count case where a step must copy a shared block to fit exactly."""
    cases = test_paged_step.PLANS["paged_step.exact_count"](rng_for(0, "paged_step.exact_count"))
    return next(c for c in cases if any(a[0] == "share" for a in c.inputs["actions"]))


def test_a_step_that_cannot_copy_because_copy_block_raises_fails_and_names_part_1():
    """A fit step that must copy while copy_block raises cannot be observed: failed, never passed,
    with Part 1 named (before, it was left out while copy_block failed its own check)."""
    case = _copy_case()
    expected = scenarios.step_script(reference, **case.inputs)
    got = scenarios.step_script(_fake(BlockPool=_NoCopy), **case.inputs)
    message = test_paged_step.JUDGES["paged_step.exact_count"](case, expected, got, Context())
    assert message and "pool.copy_block (Part 1) that runs: fix Part 1 first" in message, message


def test_a_step_whose_count_ignores_copies_fails_whatever_copy_block_does():
    """The issue's third case: a step whose block count ignores copies, plus copy_block failing its own
    check, got Part 2's copy-count points back. Part 2's count decides MemoryError before anything
    changes: one block short, the step must raise and change nothing, whatever copy_block does."""
    class CopyRaises(reference.BlockPool):
        def copy_block(self, b):
            raise ValueError("copy_block is broken")

    def ignores_copies(params, cfg, seqs, chunks):
        need = sum(max(0, -(-(s.length + len(c)) // s.pool.block_size) - len(s.blocks)) for s, c in zip(seqs, chunks))
        if seqs and need > seqs[0].pool.n_free:
            raise MemoryError("short")
        for seq, c in zip(seqs, chunks):
            seq.reserve(len(c))
        return [np.zeros((len(c), cfg.vocab)) for c in chunks]
    cases = test_paged_step.PLANS["paged_step.all_or_nothing"](rng_for(0, "paged_step.all_or_nothing"))
    case = next(c for c in cases if any(a[0] == "share" for a in c.inputs["actions"]))
    expected = scenarios.step_script(reference, **case.inputs)
    for pool in (reference.BlockPool, CopyRaises):
        got = scenarios.step_script(_fake(BlockPool=pool, paged_step=ignores_copies), **case.inputs)
        assert test_paged_step.JUDGES["paged_step.all_or_nothing"](case, expected, got, Context())


class _IncrefsSource(reference.BlockPool):
    """copy_block that also increfs its source (Part 1's bug): a shared block's holders each still find it
    shared, so a step on it makes one copy too many and runs out of blocks after it started."""

    def copy_block(self, b):
        new = super().copy_block(b)
        self.incref(b)
        return new


def test_an_exact_fit_that_runs_out_while_copying_is_not_charged_to_part_2():
    """copy_block's extra reference (Part 1's) would make a step that fits exactly run out: the grader
    puts its ledger in front of such a pool (copy_block moves references: it keeps the references and
    copies itself), so Part 2's exact count is judged as for a working pool, with no exemption."""
    from grader.hidden.conftest import LEDGER
    judge = test_paged_step.JUDGES["paged_step.exact_count"]
    for seed in (0, 1, 2):
        for case in test_paged_step.PLANS["paged_step.exact_count"](rng_for(seed, "paged_step.exact_count")):
            expected = scenarios.step_script(reference, **case.inputs)
            got = scenarios.step_script(_fake(BlockPool=_IncrefsSource), **case.inputs, ledger=LEDGER)
            assert judge(case, expected, got, Context()) is None, (seed, case.name)


def test_an_exact_fit_that_runs_out_because_copy_on_write_copies_too_often_names_part_4():
    """A copy-on-write that leaks the shared block (Part 4's rule broken) makes a step that fits run
    out: no exemption, the case fails, and its message names Part 4 (scenarios.cow_probe)."""
    from grader.selftest import mutants
    bad = load(mutants.apply(mutants.BY_NAME["cow_leaks_shared"]), "cow_leaks_shared")
    judge = test_paged_step.JUDGES["paged_step.exact_count"]
    verdicts = [judge(c, scenarios.step_script(reference, **c.inputs), scenarios.step_script(bad, **c.inputs), Context())
                for c in test_paged_step.PLANS["paged_step.exact_count"](rng_for(0, "paged_step.exact_count"))]
    assert any(verdicts) and all("fix Part 4 first" in v for v in verdicts if v), verdicts


def test_a_count_that_refuses_an_exact_fit_up_front_fails_whatever_copy_block_does():
    from grader.selftest import mutants
    bad = load(mutants.apply(mutants.BY_NAME["count_copies_n"]), "count_copies_n")

    class Pool(bad.BlockPool):
        def copy_block(self, b):
            new = bad.BlockPool.copy_block(self, b)
            self.incref(b)
            return new
    judge = test_paged_step.JUDGES["paged_step.exact_count"]
    cases = test_paged_step.PLANS["paged_step.exact_count"](rng_for(0, "paged_step.exact_count"))
    for pool in (bad.BlockPool, Pool):
        fake = types.SimpleNamespace(BlockPool=pool, PagedSequence=bad.PagedSequence, paged_step=bad.paged_step)
        verdicts = [judge(c, scenarios.step_script(reference, **c.inputs), scenarios.step_script(fake, **c.inputs),
                          Context()) for c in cases]
        assert any(v and "error: expected no error, got" in v and "MemoryError" in v for v in verdicts), verdicts
