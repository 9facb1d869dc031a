"""The given model (lab/transformer_lab.py): every expected value comes from a naive loop, from the
same model run another way (one shot vs incremental), or from the contract's shapes."""
import math
from functools import lru_cache

import numpy as np
import pytest

import transformer_lab as tl
from transformer_lab import TINY, Config, KVCache, attention_core, forward

ODD = Config(vocab=97, d_model=37, n_layers=3, n_heads=3, d_head=8, d_ff=50, max_len=64)
CONFIGS = [pytest.param(TINY, id="TINY"), pytest.param(ODD, id="ODD")]


@lru_cache(maxsize=None)
def params(cfg, seed=0):
    return tl.init_params(cfg, seed)


def tokens(cfg, shape, seed):
    return np.random.default_rng(seed).integers(0, cfg.vocab, shape)


def assert_close(got, expected, tol, what):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    err = float(np.max(np.abs(got - expected))) if got.size else 0.0
    assert err <= tol, f"{what}: max |got - expected| = {err:.3e} > {tol:.0e}"


def naive_attention(q, K, V, start):
    """One query, one head at a time, softmax written out: query i sees keys 0..start+i."""
    T, H, Dh = q.shape
    out = np.zeros_like(q)
    for h in range(H):
        for i in range(T):
            seen = range(min(start + i + 1, K.shape[0]))
            s = [sum(q[i, h, d] * K[j, h, d] for d in range(Dh)) / math.sqrt(Dh) for j in seen]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            z = sum(e)
            out[i, h] = sum((e[j] / z) * V[j, h] for j in seen)
    return out


def rand_qkv(T, S, H=3, Dh=5, lead=(), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(lead + (T, H, Dh)), rng.standard_normal(lead + (S, H, Dh)),
            rng.standard_normal(lead + (S, H, Dh)))


# ------------------------------------------------------------------ parameters and shapes
@pytest.mark.parametrize("cfg", CONFIGS)
def test_init_params_is_deterministic_in_seed(cfg):
    a, b, c = tl.init_params(cfg, 3), tl.init_params(cfg, 3), tl.init_params(cfg, 4)
    assert sorted(a) == sorted(b) == sorted(c)
    for name in a:
        assert np.array_equal(a[name], b[name]), f"init_params(seed=3) twice: {name} differs"
        assert not np.array_equal(a[name], c[name]), f"init_params seeds 3 and 4 give the same {name}"


@pytest.mark.parametrize("cfg", CONFIGS)
def test_piece_shapes(cfg):
    p, T, (H, Dh, D) = params(cfg), 5, (cfg.n_heads, cfg.d_head, cfg.d_model)
    x = tl.embed(p, cfg, tokens(cfg, T, 0), start=2)
    assert x.shape == (T, D)
    assert tl.embed(p, cfg, tokens(cfg, (3, T), 0), start=0).shape == (3, T, D)
    for layer in range(cfg.n_layers):
        q, k, v = tl.qkv(p, cfg, layer, x)
        assert q.shape == k.shape == v.shape == (T, H, Dh)
        a = attention_core(q, k, v, 0)
        assert a.shape == (T, H, Dh)
        assert tl.attn_out(p, cfg, layer, x, a).shape == (T, D)
    assert tl.unembed(p, cfg, x).shape == (T, cfg.vocab)
    assert forward(p, cfg, tokens(cfg, (2, T), 1)).shape == (2, T, cfg.vocab)


def test_embed_is_token_plus_position():
    p, toks = params(ODD), np.array([4, 0, 96])
    assert_close(tl.embed(p, ODD, toks, 7), p["wte"][toks] + p["wpe"][7:10], 0, "embed at start 7")


# ------------------------------------------------------------------ attention_core
@pytest.mark.parametrize("T,S,start", [(1, 1, 0), (6, 6, 0), (1, 9, 8), (3, 10, 7), (4, 12, 2), (5, 5, 3)],
                         ids=lambda v: str(v))
def test_attention_core_equals_naive_loop(T, S, start):
    q, K, V = rand_qkv(T, S, seed=T * 100 + S)
    assert_close(attention_core(q, K, V, start), naive_attention(q, K, V, start), 1e-12,
                 f"attention_core vs naive loop (T={T}, S={S}, start={start})")


@pytest.mark.parametrize("q_lead,kv_lead", [((2, 3), (3,)), ((2, 3), (2, 1)), ((4,), ()), ((), (2,))],
                         ids=lambda v: str(v))
def test_attention_core_broadcasts_leading_dims(q_lead, kv_lead):
    rng = np.random.default_rng(5)
    T, S, H, Dh, start = 3, 7, 2, 4, 4
    q = rng.standard_normal(q_lead + (T, H, Dh))
    K, V = rng.standard_normal((2,) + kv_lead + (S, H, Dh))
    got = attention_core(q, K, V, start)
    lead = np.broadcast_shapes(q_lead, kv_lead)
    assert got.shape == lead + (T, H, Dh)
    qb, Kb, Vb = (np.broadcast_to(a, lead + a.shape[-3:]) for a in (q, K, V))
    for idx in np.ndindex(*lead):
        assert_close(got[idx], naive_attention(qb[idx], Kb[idx], Vb[idx], start), 1e-12,
                     f"attention_core batch element {idx}")


@pytest.mark.parametrize("start", [0, 3])
def test_attention_core_is_causal_with_offset(start):
    """Query i sits at position start+i: key start+i changes its output, key start+i+1 does not."""
    T, S = 4, 4 + start
    q, K, V = rand_qkv(T, S, seed=11)
    base = attention_core(q, K, V, start)
    for i in range(T - 1):
        K2, V2 = K.copy(), V.copy()
        K2[start + i + 1:] += 10.0
        V2[start + i + 1:] -= 10.0
        moved = attention_core(q, K2, V2, start)
        assert_close(moved[:i + 1], base[:i + 1], 1e-14, f"queries 0..{i} after changing keys > {start + i}")
        assert np.max(np.abs(moved[i + 1] - base[i + 1])) > 1e-3, \
            f"query {i + 1} (position {start + i + 1}) must see key {start + i + 1}"


@pytest.mark.parametrize("cfg", CONFIGS)
def test_forward_is_causal(cfg):
    toks = tokens(cfg, (1, 12), 2)
    base = forward(params(cfg), cfg, toks)
    toks2 = toks.copy()
    toks2[0, 7:] = (toks2[0, 7:] + 1) % cfg.vocab
    got = forward(params(cfg), cfg, toks2)
    assert_close(got[:, :7], base[:, :7], 1e-12, "logits before a changed token")
    assert np.max(np.abs(got[:, 7] - base[:, 7])) > 1e-6, "changing token 7 must change logits at 7"


# ------------------------------------------------------------------ forward, with and without a cache
@pytest.mark.parametrize("cfg", CONFIGS)
def test_forward_without_cache_equals_fresh_cache(cfg):
    toks = tokens(cfg, (2, 19), 3)
    cache = KVCache(cfg, 2)
    got = forward(params(cfg), cfg, toks, cache=cache)
    assert cache.length == 19
    assert_close(got, forward(params(cfg), cfg, toks), 1e-12, "forward with a fresh cache vs without")


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_forward_equals_one_shot(cfg, seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(20, 50))
    toks = tokens(cfg, (2, L), seed)
    whole = forward(params(cfg), cfg, toks)
    # prefill, then one token at a time
    prefill = int(rng.integers(1, 10))
    cache = KVCache(cfg, 2)
    parts = [forward(params(cfg), cfg, toks[:, :prefill], cache=cache)]
    parts += [forward(params(cfg), cfg, toks[:, t:t + 1], cache=cache) for t in range(prefill, L)]
    assert cache.length == L
    assert_close(np.concatenate(parts, axis=1), whole, 1e-10, f"prefill {prefill} + decodes vs one shot")
    # random chunk sizes
    cuts = np.sort(rng.choice(np.arange(1, L), size=5, replace=False))
    cache = KVCache(cfg, 2)
    parts = [forward(params(cfg), cfg, c, cache=cache) for c in np.split(toks, cuts, axis=1)]
    assert_close(np.concatenate(parts, axis=1), whole, 1e-10, f"chunks cut at {cuts.tolist()} vs one shot")


@pytest.mark.parametrize("cfg", CONFIGS)
def test_batch_rows_are_independent(cfg):
    toks = tokens(cfg, (3, 10), 4)
    batched = KVCache(cfg, 3)
    got = np.concatenate([forward(params(cfg), cfg, toks[:, :6], cache=batched),
                          forward(params(cfg), cfg, toks[:, 6:], cache=batched)], axis=1)
    for b in range(3):
        cache = KVCache(cfg, 1)
        alone = forward(params(cfg), cfg, toks[b:b + 1], cache=cache)[0]
        assert_close(got[b], alone, 1e-10, f"batch row {b} vs the same row alone")


# ------------------------------------------------------------------ max_len
def test_forward_rejects_more_than_max_len_without_cache():
    p, n = params(ODD), ODD.max_len
    assert forward(p, ODD, tokens(ODD, (1, n), 5)).shape == (1, n, ODD.vocab)   # exactly max_len is fine
    with pytest.raises(ValueError):
        forward(p, ODD, tokens(ODD, (1, n + 1), 5))


def test_forward_rejects_passing_max_len_with_cache():
    p, n = params(ODD), ODD.max_len
    cache = KVCache(ODD, 1)
    forward(p, ODD, tokens(ODD, (1, n - 3), 6), cache=cache)
    with pytest.raises(ValueError):
        forward(p, ODD, tokens(ODD, (1, 4), 7), cache=cache)
    assert cache.length == n - 3, "a rejected chunk must leave the cache length alone"
    forward(p, ODD, tokens(ODD, (1, 3), 7), cache=cache)                        # reaching max_len is fine
    assert cache.length == n
    with pytest.raises(ValueError):
        forward(p, ODD, tokens(ODD, (1, 1), 8), cache=cache)


def test_embed_rejects_positions_past_max_len():
    with pytest.raises(ValueError):
        tl.embed(params(ODD), ODD, [1, 2], ODD.max_len - 1)
    assert tl.embed(params(ODD), ODD, [1, 2], ODD.max_len - 2).shape == (2, ODD.d_model)
