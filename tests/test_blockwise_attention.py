"""Part 3: blockwise attention (the vLLM paper's eq. 4).

blockwise_attention gets a plain object with only pool.k, pool.v, pool.block_size, pool.cfg, blocks
and length, over storage that is random in every block, layer and slot and serves one block per
index (scenarios.OneBlockAtATime: pool.k[layer, b] works, pool.k[layer, blocks] is refused). The
expected answer is the lab's attention_core on K and V gathered from that storage through the table."""
import math

import numpy as np
import pytest

import scenarios as sc
import transformer_lab as tl
from support import SMALL, TOL_ATTENTION, close, fail

pytestmark = pytest.mark.blockwise_attention
SECTION = "Part 3: blockwise attention"
HINT = ("  Common causes: a softmax per block instead of one over all positions; reading the unfilled "
        "slots of the last block\n  or blocks past ceil(length / block_size); the wrong layer; a scale "
        "other than 1/sqrt(d_head).\n  A non-finite value (NaN or inf): no maximum subtracted before exp "
        "(large scores overflow), or one maximum taken\n  over all heads instead of each head's own "
        "(a head whose scores lie far below it gets exp = 0 everywhere: 0 / 0).")


def gathered_attention(cfg, n_blocks, block_size, seed, case):
    """The expected output: attention_core(q[None, None], K, V, length - 1)[0, 0] on K and V gathered
    position by position through the table (and the storage it was computed on)."""
    pool, q = sc.blockwise_inputs(cfg, n_blocks, block_size, seed, case)
    pos = np.arange(case["length"])
    blocks = np.array([int(b) for b in case["table"]])[pos // block_size]
    K, V = pool.k[case["layer"], blocks, pos % block_size], pool.v[case["layer"], blocks, pos % block_size]
    return tl.attention_core(q[None, None], K, V, case["length"] - 1)[0, 0], pool


def attends_like_attention_core(pk, table, length, layer=0, q_seed=0, cfg=None, n_blocks=8, block_size=4,
                                **extra):
    """Your blockwise_attention on a sequence with this table and length, at this layer, over random
    storage; its output must match gathered_attention's. Returns your output."""
    one = {"table": list(table), "length": length, "layer": layer, "q_seed": q_seed, **extra}
    got = sc.blockwise(pk, cfg, n_blocks, block_size, [one])[0]
    what = f"blockwise_attention with block size {block_size}, table {list(table)}, length {length}, layer {layer}"
    if got["refused"] is not None:
        fail(f"{what}: {sc.REFUSALS[got['refused']]}", SECTION)
    if got["error"] is not None:
        fail(f"{what}: raised {got['error']['kind']}: {got['error']['message']}\n  It gets a plain object "
             "with only pool.k, pool.v, pool.block_size, pool.cfg, blocks and length: no methods.", SECTION)
    expected, _ = gathered_attention(sc.config(cfg), n_blocks, block_size, 0, one)
    close(f"{what}: output (index [head, d]) vs attention_core on the gathered K and V",
          expected, got["out"], TOL_ATTENTION, SECTION, HINT)
    return got["out"]


BOUNDARIES = [(B, L) for B in (1, 4, 5, 16) for L in (2 * B - 1, 2 * B, 2 * B + 1)] + [(4, 1), (16, 1)]


@pytest.mark.parametrize("block_size, length", BOUNDARIES, ids=[f"B{B}-len{L}" for B, L in BOUNDARIES])
def test_lengths_around_block_boundaries(pk, block_size, length):
    n_blocks = math.ceil(length / block_size) + 2
    table = list(range(n_blocks))[::-1][:math.ceil(length / block_size)]     # high ids first
    attends_like_attention_core(pk, table, length, layer=1, q_seed=length, n_blocks=n_blocks, block_size=block_size)


@pytest.mark.parametrize("layer", [0, 1])
def test_non_monotone_table_in_every_layer(pk, layer):
    attends_like_attention_core(pk, [6, 1, 4, 0, 7], 18, layer=layer, q_seed=3)


def test_entries_past_the_length_are_not_read(pk):
    """The table is longer than ceil(length / B): only its first 2 entries, and 1 slot of the second."""
    attends_like_attention_core(pk, [2, 5, 3, 7], 5, q_seed=4)


def test_one_position_returns_its_value(pk):
    """With one key the softmax weight is 1: the output is that position's V, exactly."""
    got = attends_like_attention_core(pk, [3], 1, layer=1, q_seed=5, n_blocks=4)
    _, storage = gathered_attention(sc.config(None), 4, 4, 0, {"table": [3], "length": 1, "layer": 1, "q_seed": 5})
    close("length 1: the output vs pool.v[1, 3, 0]", storage.v[1, 3, 0], got, TOL_ATTENTION, SECTION)


def test_another_config(pk):
    for layer in range(SMALL["n_layers"]):
        attends_like_attention_core(pk, [4, 0, 2], 7, layer=layer, q_seed=6, cfg=SMALL, n_blocks=5, block_size=3)


def test_large_scores_do_not_overflow(pk):
    """One head's scores near 900: exp without subtracting the maximum overflows to inf."""
    attends_like_attention_core(pk, [1, 0, 2], 10, q_seed=7, n_blocks=4, q_scale=900.0)


def test_numpy_integer_block_ids(pk):
    attends_like_attention_core(pk, [np.int64(2), np.int64(0)], 6, q_seed=8, n_blocks=4)


def test_length_zero_is_a_value_error(pk):
    got = sc.blockwise(pk, None, 4, 4, [{"table": [], "length": 0, "layer": 0, "q_seed": 0}])[0]
    if got["error"] is None or got["error"]["kind"] != "ValueError":
        result = "no error" if got["error"] is None else f"{got['error']['kind']}: {got['error']['message']}"
        fail(f"blockwise_attention on a sequence of length 0: expected ValueError, got {result}", SECTION)
