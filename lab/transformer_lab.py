"""The TINY decoder-only transformer of the course, in float64 numpy.

Pre-LayerNorm GPT: token + learned position embeddings, per layer causal multi-head attention and a
GELU MLP (each with a residual), a final LayerNorm and an unembedding. `forward` is composed from
the same public pieces (`embed`, `qkv`, `attention_core`, `attn_out`, `unembed`) that a paged step
uses, so a correct paged implementation reproduces its logits to rounding error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Config:
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    d_ff: int
    max_len: int


TINY = Config(vocab=256, d_model=64, n_layers=2, n_heads=4, d_head=16, d_ff=256, max_len=512)


def init_params(cfg: Config, seed: int = 0) -> dict:
    """Random weights, deterministic in `seed`; scaled so logits are peaked but not one-hot."""
    rng = np.random.default_rng(seed)
    D, H, Dh, F = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_ff

    def w(*shape, fan_in):
        return rng.standard_normal(shape) / np.sqrt(fan_in)

    p = {"wte": rng.standard_normal((cfg.vocab, D)), "wpe": 0.5 * rng.standard_normal((cfg.max_len, D))}
    for i in range(cfg.n_layers):
        p[f"ln1_{i}"] = 1.0 + 0.1 * rng.standard_normal(D)
        p[f"wqkv_{i}"] = w(D, 3 * H * Dh, fan_in=D)
        p[f"wo_{i}"] = w(H * Dh, D, fan_in=H * Dh)
        p[f"ln2_{i}"] = 1.0 + 0.1 * rng.standard_normal(D)
        p[f"w1_{i}"] = w(D, F, fan_in=D)
        p[f"w2_{i}"] = w(F, D, fan_in=F)
    p["lnf"] = 1.0 + 0.1 * rng.standard_normal(D)
    p["wu"] = w(D, cfg.vocab, fan_in=D) * 3.0
    return p


def _layer_norm(x, gain):
    # sums over the count, as mean() computes them (the same bits), without its overhead: the model
    # runs this three times a layer for every token the tests and the demos decode
    n = x.shape[-1]
    d = x - x.sum(axis=-1, keepdims=True) / n
    var = (d ** 2).sum(axis=-1, keepdims=True) / n
    return d / np.sqrt(var + 1e-5) * gain


def _gelu(x):
    # x * x * x, not x ** 3: numpy's power calls pow() per element, 100x slower here and the
    # MLP's largest cost (every paged step of every test runs it)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * (x * x * x))))


def embed(params, cfg, tokens, start):
    """tokens [..., T] at positions start..start+T-1 -> [..., T, d_model]."""
    tokens = np.asarray(tokens)
    T = tokens.shape[-1]
    if start < 0 or start + T > cfg.max_len:
        raise ValueError(f"positions {start}..{start + T - 1} are outside [0, max_len={cfg.max_len})")
    return params["wte"][tokens] + params["wpe"][start:start + T]


def qkv(params, cfg, layer, x):
    """x [..., T, D] -> (q, k, v), each [..., T, n_heads, d_head]."""
    h = _layer_norm(x, params[f"ln1_{layer}"]) @ params[f"wqkv_{layer}"]
    n = cfg.n_heads * cfg.d_head
    shape = x.shape[:-1] + (cfg.n_heads, cfg.d_head)
    return h[..., :n].reshape(shape), h[..., n:2 * n].reshape(shape), h[..., 2 * n:].reshape(shape)


def attention_core(q, K, V, start):
    """Causal attention: query i (at position start+i) sees keys 0..start+i.

    q [..., T, H, Dh]; K, V [..., S, H, Dh] (leading dims broadcast) -> [..., T, H, Dh].
    """
    T, S, Dh = q.shape[-3], K.shape[-3], q.shape[-1]
    qh = q.swapaxes(-3, -2)                           # [..., H, T, Dh]
    kh = K.swapaxes(-3, -2)                           # [..., H, S, Dh]
    vh = V.swapaxes(-3, -2)
    scores = (qh @ kh.swapaxes(-1, -2)) / np.sqrt(Dh)       # [..., H, T, S]
    visible = np.arange(S)[None, :] <= (start + np.arange(T))[:, None]
    scores = np.where(visible, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True)
    return (p @ vh).swapaxes(-3, -2)                  # [..., T, H, Dh]


def attn_out(params, cfg, layer, x, a):
    """a [..., T, H, Dh]: output projection + residual, then MLP + residual."""
    x = x + a.reshape(a.shape[:-2] + (cfg.n_heads * cfg.d_head,)) @ params[f"wo_{layer}"]
    h = _gelu(_layer_norm(x, params[f"ln2_{layer}"]) @ params[f"w1_{layer}"])
    return x + h @ params[f"w2_{layer}"]


def unembed(params, cfg, x):
    """[..., T, D] -> logits [..., T, vocab]."""
    return _layer_norm(x, params["lnf"]) @ params["wu"]


class KVCache:
    """The contiguous cache: one [batch, max_len, H, Dh] slab per layer for K and for V."""

    def __init__(self, cfg, batch):
        shape = (cfg.n_layers, batch, cfg.max_len, cfg.n_heads, cfg.d_head)
        self.cfg, self.batch = cfg, batch
        self.k = np.zeros(shape)
        self.v = np.zeros(shape)
        self.length = 0


def forward(params, cfg, tokens, cache=None):
    """tokens [B, T] -> logits [B, T, vocab]. With a cache, appends this chunk's K/V and attends to
    every cached position; without one, the chunk starts at position 0."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [batch, T], got shape {tokens.shape}")
    B, T = tokens.shape
    start = 0 if cache is None else cache.length
    if cache is not None and cache.batch != B:
        raise ValueError(f"cache holds {cache.batch} sequences, tokens has {B}")
    if start + T > cfg.max_len:
        raise ValueError(f"{start} + {T} tokens exceed max_len={cfg.max_len}")
    x = embed(params, cfg, tokens, start)
    for layer in range(cfg.n_layers):
        q, k, v = qkv(params, cfg, layer, x)
        if cache is None:
            K, V = k, v
        else:
            cache.k[layer, :, start:start + T] = k
            cache.v[layer, :, start:start + T] = v
            K, V = cache.k[layer, :, :start + T], cache.v[layer, :, :start + T]
        x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start))
    if cache is not None:
        cache.length = start + T
    return unembed(params, cfg, x)
