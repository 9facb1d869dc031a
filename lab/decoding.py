"""Parallel sampling and beam search, with and without a paged KV pool.

`pool=None` is the baseline of systems before vLLM: every sample or beam owns a contiguous KVCache,
and a beam's children copy their parent's whole cache. With a pool, the prompt is prefilled once and
forked, and copy-on-write in the student's `paged_kv` does the rest. Both paths draw the same random
numbers and break ties the same way, so their outputs are identical.

`paged_kv` is imported inside the functions: it re-exports these drivers, so a module-level import
would be circular.
"""
import copy
import math

import numpy as np

from transformer_lab import KVCache, forward


def _sample(logits, temperature, rng):
    """Inverse-CDF sampling from softmax(logits / temperature), one uniform draw per call."""
    z = logits / temperature
    p = np.exp(z - z.max())
    cdf = np.cumsum(p / p.sum())
    return int(min(np.searchsorted(cdf, rng.random(), side="right"), len(cdf) - 1))


def _log_softmax(logits):
    z = logits - logits.max()
    return z - np.log(np.exp(z).sum())


def _record(stats, pool, seqs):
    stats["blocks_used"].append(pool.n_used)
    stats["blocks_unshared"].append(sum(math.ceil(s.length / pool.block_size) for s in seqs))


def parallel_sample(params, cfg, prompt, n, max_new, temperature, seed, pool=None):
    """n samples of max_new tokens each from one prompt -> (samples, stats)."""
    prompt = np.asarray(prompt, dtype=np.int64)
    rng = np.random.default_rng(seed)
    stats = {"blocks_used": [], "blocks_unshared": []}
    if pool is None:
        caches = [KVCache(cfg, 1) for _ in range(n)]
        logits = [forward(params, cfg, prompt[None], cache=c)[0, -1] for c in caches]
        step = lambda toks: [forward(params, cfg, np.array([[t]]), cache=c)[0, -1]  # noqa: E731
                             for c, t in zip(caches, toks)]
    else:
        from paged_kv import PagedSequence, paged_step
        first = PagedSequence(pool)
        logits = [paged_step(params, cfg, [first], [prompt])[0][-1]] * n
        seqs = [first] + [first.fork() for _ in range(n - 1)]
        _record(stats, pool, seqs)

        def step(toks):
            outs = paged_step(params, cfg, seqs, [[t] for t in toks])
            _record(stats, pool, seqs)
            return [o[-1] for o in outs]
    samples = [[] for _ in range(n)]
    for t in range(max_new):
        toks = [_sample(lg, temperature, rng) for lg in logits]
        for s, tok in zip(samples, toks):
            s.append(tok)
        if t < max_new - 1:
            logits = step(toks)
    if pool is not None:
        for s in seqs:
            s.free()
    return samples, stats


def beam_search(params, cfg, prompt, k, steps, pool=None):
    """Beam search of width k for `steps` tokens -> (beams, stats), beams = [(score, tokens)], best first.

    Each step ranks every (beam, next token) by total log-probability (ties: lower beam index, then
    lower token id), keeps the top k, gives each kept child its parent's KV (a fork, or a full copy in
    the baseline), frees the parents and feeds the children's new tokens.
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    stats = {"blocks_used": [], "blocks_unshared": [], "copied_tokens": 0}
    if pool is None:
        caches = [KVCache(cfg, 1)]
        logits = [forward(params, cfg, prompt[None], cache=caches[0])[0, -1]]
    else:
        from paged_kv import PagedSequence, paged_step
        seqs = [PagedSequence(pool)]
        logits = [paged_step(params, cfg, seqs, [prompt])[0][-1]]
    beams = [(0.0, [])]
    for _ in range(steps):
        cand = np.stack([score + _log_softmax(lg) for (score, _), lg in zip(beams, logits)])
        order = np.argsort(-cand, axis=None, kind="stable")[:k]
        picks = [divmod(int(i), cand.shape[1]) for i in order]
        beams = [(float(cand[p, w]), beams[p][1] + [w]) for p, w in picks]
        toks = [[w] for _, w in picks]
        if pool is None:
            children = []
            for p, _ in picks:
                children.append(copy.deepcopy(caches[p]))
                stats["copied_tokens"] += caches[p].length
            caches = children
            logits = [forward(params, cfg, np.array(t)[None], cache=c)[0, -1] for c, t in zip(caches, toks)]
        else:
            children = [seqs[p].fork() for p, _ in picks]
            for s in seqs:
                s.free()
            seqs = children
            logits = [o[-1] for o in paged_step(params, cfg, seqs, toks)]
            _record(stats, pool, seqs)
    if pool is not None:
        stats["copied_tokens"] = pool.n_copies * pool.block_size
        for s in seqs:
            s.free()
    return beams, stats
