"""Hidden inputs, drawn on the trusted side from a per-student seed: other Configs, block sizes from
1 to 64 (not only powers of two), fragmented pools and random operation sequences. Where a script
must stay meaningful (steps that just fit), the scenario counts it on the state it observes; Part 1's
random scripts are drawn from the contract's rules alone (scenarios.random_pool_ops)."""
import hashlib
from collections import namedtuple

import numpy as np

import scenarios

# One scenario call; `name` is shown in feedback. `second`: None, or the case's second run, made on
# the trusted side and sent in a worker of its own (conftest.Grading): second(expected, got) -> the
# [scenario, inputs] calls whose answers the judge compares the first run with (ctx.second).
Case = namedtuple("Case", "name scenario inputs second", defaults=(None,))

ODD_BLOCK_SIZES = (1, 2, 3, 5, 6, 7, 9, 11, 13, 16, 17, 24, 31, 33, 48, 64)


def core_rng(name):
    """A generator that is the same for every seed: a check's core cases draw from it, so the states
    they reach (a full pool, a block handed out again, ...) do not depend on the student; the check's
    last case draws from the student's rng."""
    return np.random.default_rng(int.from_bytes(hashlib.sha256(f"core:{name}".encode()).digest()[:8], "little"))


def pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def random_config(rng, max_len=None):
    """A small Config unlike TINY (shapes only matter for layout and exactness)."""
    return {"vocab": int(rng.integers(20, 120)), "d_model": int(rng.integers(6, 26)),
            "n_layers": int(rng.integers(1, 4)), "n_heads": int(rng.integers(1, 5)),
            "d_head": int(rng.integers(2, 9)), "d_ff": int(rng.integers(8, 40)),
            "max_len": int(max_len or rng.integers(96, 200))}


def tokens(rng, n, cfg=None):
    vocab = (cfg or {}).get("vocab", 256)
    return [int(t) for t in rng.integers(0, vocab, n)]


def step_case(name, actions, cfg=None, n_blocks=64, block_size=4, param_seed=0, record_kv=False):
    return Case(name, "step_script", {"cfg": cfg, "param_seed": param_seed, "n_blocks": n_blocks,
                                      "block_size": block_size, "actions": actions, "record_kv": record_kv})


def sharing_case(name, actions, cfg=None, n_blocks=96, block_size=4, param_seed=0, twin=False):
    """twin=True: also its twin without sharing, a step_script of the unshared script (scenarios.sharing_twin)."""
    inputs = {"cfg": cfg, "param_seed": param_seed, "n_blocks": n_blocks, "block_size": block_size, "actions": actions}
    twin_call = scenarios.sharing_twin(**inputs) if twin else None
    return Case(name, "sharing_script", inputs, (lambda expected, got: [twin_call]) if twin else None)


def prefill_all(rng, lengths, cfg=None):
    return [["new"] for _ in lengths] + [["step", list(range(len(lengths))), [tokens(rng, n, cfg) for n in lengths]]]


def decodes(rng, n_seqs, steps, cfg=None, fixed=False):
    """Decode steps over random subsets of the sequences, in random order; fixed=True: the same shape
    for every seed (step t: every sequence but the t-th, rotated by t), only the tokens drawn."""
    actions = []
    for t in range(steps):
        if fixed:
            idx = [(t + k) % n_seqs for k in range(n_seqs)]
            idx = [i for i in idx if i != t % n_seqs or n_seqs == 1] if t % 3 == 2 else idx
        else:
            idx = rng.permutation(n_seqs)[: int(rng.integers(1, n_seqs + 1))].tolist()
        actions.append(["step", idx, [tokens(rng, 1, cfg) for _ in idx]])
    return actions


def interleaved(rng, n_seqs, steps, cfg=None, take=0.3, fixed=False):
    """Decode steps with the test taking a block now and then (fixed=True: before every third step), so
    tables become non-monotone and scattered without anything ever being freed."""
    actions = []
    for t, step in enumerate(decodes(rng, n_seqs, steps, cfg, fixed)):
        if (t % 3 == 1) if fixed else rng.random() < take:
            actions.append(["alloc"])
        actions.append(step)
    return actions
