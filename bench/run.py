"""Benchmarks of the reference (make bench): demo wall time, cost of paging in decode, pool memory,
and demo 5 (the bonus): prefix caching's wall time and figures.

    .venv/bin/python bench/run.py

(b) compares decode steps: paged_step on 8 sequences against the contiguous forward on the same
tokens, (i) batched as one [8, 1] call with a KVCache(cfg, 8) and (ii) one call per sequence. The
reference runs the sequences of a step that stand at the same position with chunks of one size as
one batch (the common case in parallel sampling and beam search), so with equal prompts it does the
very computation of (i), plus the gather through the block tables, and its logits equal (i) bit for
bit. Sequences at different positions run one by one, like (ii): that is (b2).
"""
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "solution"), os.path.join(ROOT, "lab")]

import demo  # noqa: E402
import paged_kv as pk  # noqa: E402
from transformer_lab import TINY, KVCache, forward, init_params  # noqa: E402

N_SEQ, PROMPT, STEPS, BS, REPEATS = 8, 128, 64, 16, 5


def demo_wall_time():
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "lab/demo.py", "--impl", "solution"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def prefix_cache_report():
    """(d) demo 5 alone, in-process (median of 3), then its figures and each run's time per R."""
    lab, times = demo._Lab(), []
    for _ in range(3):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            demo.demo5_prefix_cache(pk, lab)
        times.append(time.perf_counter() - t0)
    print(f"\n(d) demo 5 (prefix cache, bonus): {statistics.median(times):.2f} s (median of 3). {demo.SYSTEM5}-token "
          f"system prompt + {demo.QUESTION5}-token question per request, {demo.STEPS5} decode steps, block size "
          f"{demo.BS5}")
    print("     R  prefill tokens computed  saved  peak blocks  hit rate  serve time (s)  max |cached - uncached|")
    print("        no cache -> cache               no cache -> cache       no cache / cache")
    for R in (2, 4, 8):
        prompts, runs = demo.shared_prompts(lab, R), []
        for with_cache in (False, True):
            t0 = time.perf_counter()
            runs.append(demo.serve(pk, lab, prompts, with_cache))
            runs[-1]["seconds"] = time.perf_counter() - t0
        plain, cached = runs
        saved = 1 - cached["computed"] / plain["computed"]
        hit = cached["hit"] / sum(map(len, prompts))
        print(f"    {R:>2}  {plain['computed']:>10} -> {cached['computed']:<10}  {saved:>5.1%}  "
              f"{plain['peak']:>4} -> {cached['peak']:<5}  {hit:>8.1%}  "
              f"{plain['seconds']:>6.3f} / {cached['seconds']:<6.3f}  {demo.max_difference(plain, cached):.1e}")


def paged_run(step_fn, params, prompts, steps):
    pool = pk.BlockPool(TINY, n_blocks=len(prompts) * ((PROMPT + STEPS) // BS + 1), block_size=BS)
    seqs = [pk.PagedSequence(pool) for _ in prompts]
    pk.paged_step(params, TINY, seqs, list(prompts))
    t0 = time.perf_counter()
    outs = [step_fn(params, TINY, seqs, [[t] for t in toks]) for toks in steps]
    return time.perf_counter() - t0, outs, seqs


def decode_runs(params, prompts, steps):
    """ms per decode step for: paged_step on all sequences, one batched forward [B, 1] with a
    KVCache(cfg, B) (only when every prompt has one length), and B separate forwards with
    KVCache(cfg, 1). Returns the times and the max differences of the logits."""
    B = len(prompts)
    t_paged, paged, _ = paged_run(pk.paged_step, params, prompts, steps)
    t_batched, d_batched = float("nan"), float("nan")
    if len({len(p) for p in prompts}) == 1:
        cache = KVCache(TINY, B)
        forward(params, TINY, np.stack(prompts), cache=cache)
        t0 = time.perf_counter()
        batched = [forward(params, TINY, toks[:, None], cache=cache) for toks in steps]
        t_batched = time.perf_counter() - t0
        d_batched = max(float(np.max(np.abs(np.stack(p)[:, 0] - b[:, 0]))) for p, b in zip(paged, batched))
    caches = [KVCache(TINY, 1) for _ in range(B)]
    for c, p in zip(caches, prompts):
        forward(params, TINY, np.asarray(p)[None], cache=c)
    t0 = time.perf_counter()
    single = [[forward(params, TINY, np.array([[t]]), cache=c)[0] for c, t in zip(caches, toks)] for toks in steps]
    t_single = time.perf_counter() - t0
    d_single = max(float(np.max(np.abs(np.stack(p) - np.stack(s)))) for p, s in zip(paged, single))
    return [1e3 * t / len(steps) for t in (t_paged, t_batched, t_single)] + [d_batched, d_single]


def report(title, params, prompts, steps):
    runs = [decode_runs(params, prompts, steps) for _ in range(REPEATS)]
    paged, batched, single = (min(r[i] for r in runs) for i in range(3))
    d_b, d_s = (max(r[i] for r in runs) for i in (3, 4))
    print(f"\n{title} (best of {REPEATS} runs)")
    rows = [(f"paged_step on all {N_SEQ}", paged, "")]
    if batched == batched:                                     # not NaN: (i) exists for this workload
        rows.append((f"(i)  forward [{N_SEQ}, 1], KVCache(cfg, {N_SEQ})", batched,
                     f"paged / (i)  = {paged / batched:.2f}x (target <= 1.5x)"))
    rows.append((f"(ii) {N_SEQ} x forward, KVCache(cfg, 1)", single, f"paged / (ii) = {paged / single:.2f}x"))
    for label, ms, note in rows:
        print(f"    {label:36} {ms:6.3f} ms/step   {note}".rstrip())
    print(f"    max |paged - (i)| = {d_b:.1e}, max |paged - (ii)| = {d_s:.1e}")


def main():
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    t = demo_wall_time()
    print(f"\n(a) python lab/demo.py --impl solution: {t:.2f} s (median of 3; the lecture says ~3 s)")

    params = init_params(TINY, seed=0)
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, TINY.vocab, (N_SEQ, PROMPT))
    steps = rng.integers(0, TINY.vocab, (STEPS, N_SEQ))
    report(f"(b) decode, {N_SEQ} sequences, {PROMPT}-token prompts, {STEPS} steps, block size {BS}",
           params, list(prompts), steps)
    uneven = [rng.integers(0, TINY.vocab, PROMPT - 3 * i) for i in range(N_SEQ)]
    report(f"(b2) the same with prompts of {PROMPT - 3 * (N_SEQ - 1)}..{PROMPT} tokens (each sequence at its "
           "own position)", params, uneven, steps)

    pool = pk.BlockPool(TINY, n_blocks=256, block_size=16)
    nbytes = pool.k.nbytes + pool.v.nbytes
    contiguous = KVCache(TINY, 1)
    per_seq = contiguous.k.nbytes + contiguous.v.nbytes
    print(f"\n(c) pool storage, TINY, 256 blocks of 16: K + V = {nbytes:,} bytes ({nbytes / 2**20:.1f} MiB) "
          f"= 2 x {TINY.n_layers} layers x 256 x 16 slots x {TINY.n_heads} x {TINY.d_head} x 8 B; "
          f"{256 * 16} token slots.\n    A contiguous KVCache(TINY, 1) reserves max_len={TINY.max_len} slots: "
          f"{per_seq:,} bytes per sequence, so the pool holds the KV of {256 * 16 // TINY.max_len} max-length "
          f"sequences or of {256} sequences of <= 16 tokens.")
    prefix_cache_report()


if __name__ == "__main__":
    main()
