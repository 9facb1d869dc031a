"""The lecture's four demos (CS349E lecture 7) and demos 5 and 6 (the bonus parts), run on your paged_kv.py.

    python lab/demo.py --impl starter [--lang zh]   (what `make demo [LANG=zh]` runs; IMPL=solution
                                                     for the reference)

A demo whose parts are not implemented yet says so and the next one runs; demo N of a bonus Part N
says in one line that the bonus is not attempted when the part is not there or still the starter's
stubs (as make test decides it: tools/labtool.py). The words are in demo_text.py: English, or Chinese when --lang (by
default $LANG) starts with "zh".
"""
import argparse
import os
import sys
import traceback

import numpy as np

from demo_text import TEXTS, language

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(os.path.dirname(HERE), "tools")
if TOOLS not in sys.path:
    sys.path.append(TOOLS)
import labtool  # noqa: E402  (what a file's bonus part is, decided once for make test, make submit and the demos)


def demo1_block_table(pk, lab):
    lab.print_header(lab.t("demo1.title"))
    pool = pk.BlockPool(lab.TINY, n_blocks=8, block_size=4)
    junk = [pool.alloc() for _ in range(5)]          # a pool that has been in use for a while
    for b in (junk[0], junk[2], junk[4]):
        pool.decref(b)
    seq = pk.PagedSequence(pool)
    words = "Four score and seven years ago our".split()
    rows = []
    pk.paged_step(lab.PARAMS, lab.TINY, [seq], [np.arange(len(words)) + 10])
    rows.append([lab.t("demo1.prefill"), str(seq.blocks), seq.length, f"{seq.length - (len(seq.blocks) - 1) * 4}/4"])
    for name in ("fathers", "brought"):
        pk.paged_step(lab.PARAMS, lab.TINY, [seq], [np.array([99])])
        rows.append([lab.t("demo1.decode", word=name), str(seq.blocks), seq.length,
                     f"{seq.length - (len(seq.blocks) - 1) * 4}/4"])
    lab.print_table(lab.t("demo1.columns"), rows)
    print(lab.t("demo1.pool", n_blocks=pool.n_blocks, used=len(seq.blocks)))
    lab.print_observations(lab.t("demo1.observations"), lab.t("observations"))


def demo2_equivalence(pk, lab):
    lab.print_header(lab.t("demo2.title"))
    T = lab.TINY
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, T.vocab, L) for L in (5, 17, 33, 64)]
    rows = []
    for B in (1, 4, 16, 64):
        pool = pk.BlockPool(T, n_blocks=260 // B + 8, block_size=B)
        seqs = [pk.PagedSequence(pool) for _ in prompts]
        refs = [lab.KVCache(T, 1) for _ in prompts]
        worst, chunks = 0.0, list(prompts)
        for _ in range(21):
            outs = pk.paged_step(lab.PARAMS, T, seqs, chunks)
            new = []
            for c, o, r in zip(chunks, outs, refs):
                ref = lab.forward(lab.PARAMS, T, c[None], cache=r)[0]
                worst = max(worst, float(np.max(np.abs(o - ref))))
                new.append(np.array([int(np.argmax(o[-1]))]))
            chunks = new
        used, need = pool.n_used, sum(s.length for s in seqs)
        rows.append([B, used, used * B, need, f"{1 - need / (used * B):.1%}", f"{worst:.1e}"])
    lab.print_table(lab.t("demo2.columns"), rows)

    pool = pk.BlockPool(T, n_blocks=16, block_size=8)
    s = pk.PagedSequence(pool)
    pk.paged_step(lab.PARAMS, T, [s], [prompts[2]])
    q = rng.standard_normal((T.n_heads, T.d_head))
    K, V = s.read(1, s.length)
    ref = lab.attention_core(q[None, None], K, V, s.length - 1)[0, 0]
    d = float(np.max(np.abs(pk.blockwise_attention(q, s, 1) - ref)))
    print(lab.t("demo2.blockwise", diff=f"{d:.1e}", length=s.length, n_blocks=len(s.blocks)))
    lab.print_observations(lab.t("demo2.observations"), lab.t("observations"))


def demo3_parallel_sampling(pk, lab):
    lab.print_header(lab.t("demo3.title"))
    T = lab.TINY
    prompt = np.random.default_rng(2).integers(0, T.vocab, 100)
    rows = []
    for n in (2, 4, 6):
        ref, _ = pk.parallel_sample(lab.PARAMS, T, prompt, n, 40, 1.0, seed=7, pool=None)
        pool = pk.BlockPool(T, n_blocks=256, block_size=16)
        out, st = pk.parallel_sample(lab.PARAMS, T, prompt, n, 40, 1.0, seed=7, pool=pool)
        used, unshared = np.array(st["blocks_used"]), np.array(st["blocks_unshared"])
        rows.append([n, lab.same(out == ref), int(used[-1]), int(unshared[-1]),
                     f"{1 - used.sum() / unshared.sum():.1%}", pool.n_copies])
    lab.print_table(lab.t("demo3.columns"), rows)
    lab.print_observations(lab.t("demo3.observations"), lab.t("observations"))


def demo4_beam_search(pk, lab):
    lab.print_header(lab.t("demo4.title"))
    T = lab.TINY
    prompt = np.random.default_rng(3).integers(0, T.vocab, 64)
    rows = []
    for k in (2, 4, 6):
        ref, st_ref = pk.beam_search(lab.PARAMS, T, prompt, k, 32, pool=None)
        pool = pk.BlockPool(T, n_blocks=512, block_size=16)
        out, st = pk.beam_search(lab.PARAMS, T, prompt, k, 32, pool=pool)
        used, unshared = np.array(st["blocks_used"]), np.array(st["blocks_unshared"])
        same = [t for _, t in ref] == [t for _, t in out]
        rows.append([k, lab.same(same), f"{st_ref['copied_tokens']:,}",
                     f"{pool.n_copies * 16:,}", f"{1 - used.sum() / unshared.sum():.1%}", pool.peak_used])
    lab.print_table(lab.t("demo4.columns"), rows)
    lab.print_observations(lab.t("demo4.observations"), lab.t("observations"))


SYSTEM5, QUESTION5, STEPS5, BS5, POOL5 = 96, 12, 8, 16, 256


def shared_prompts(lab, R):
    """R requests: one system prompt, then a question of each request's own."""
    rng = np.random.default_rng(5)
    system = rng.integers(0, lab.TINY.vocab, SYSTEM5)
    return [np.concatenate([system, rng.integers(0, lab.TINY.vocab, QUESTION5)]) for _ in range(R)]


def serve(pk, lab, prompts, with_cache):
    """Prefill the prompts one after another, with or without a PrefixCache, keeping every request
    live; then decode them all together STEPS5 greedy steps. Returns the figures and, per request,
    its logits: the prefill's computed positions, then one row per decode step."""
    T = lab.TINY
    pool = pk.BlockPool(T, n_blocks=POOL5, block_size=BS5)
    cache = pk.PrefixCache(pool) if with_cache else None
    seqs, logits = [], []
    for prompt in prompts:
        seq = pk.PagedSequence(pool)
        if with_cache:
            out = pk.cached_prefill(lab.PARAMS, T, seq, prompt, cache)
        else:
            (out,) = pk.paged_step(lab.PARAMS, T, [seq], [prompt])
        seqs.append(seq)
        logits.append([np.asarray(out)])
    computed = sum(len(rows[0]) for rows in logits)
    for _ in range(STEPS5):
        # each request owns its partly filled last block (the cache holds full blocks only), so it
        # needs a new block when its last one is full; paged_step never evicts: the caller does
        short = sum(s.length % BS5 == 0 for s in seqs) - pool.n_free
        if with_cache and short > 0:
            cache.evict(short)
        outs = pk.paged_step(lab.PARAMS, T, seqs, [[int(np.argmax(rows[-1][-1]))] for rows in logits])
        for rows, out in zip(logits, outs):
            rows.append(np.asarray(out))
    return {"computed": computed, "peak": pool.peak_used, "hit": cache.n_hit_tokens if with_cache else 0,
            "outputs": [[int(np.argmax(r[-1])) for r in rows] for rows in logits], "logits": logits,
            "seqs": seqs, "cache": cache, "pool": pool}


def max_difference(plain, cached):
    """max |cached - uncached| over every position both runs computed (a hit computes fewer)."""
    return max(float(np.max(np.abs(c - p[len(p) - len(c):])))
               for rows_p, rows_c in zip(plain["logits"], cached["logits"]) for p, c in zip(rows_p, rows_c))


def bonus_ready(pk, lab, part, demo):
    """Whether a bonus demo can run: else one line says why (the part not attempted, or only some of its
    names there), decided as make test and make submit decide it (labtool.bonus_state)."""
    state, n = labtool.bonus_state(pk, part), labtool.registry.number(part)
    if state in labtool.NOT_ATTEMPTED:
        names = lab.t("bonus.and_no").join(labtool.registry.top_names(part))
        print(lab.t("bonus.not_attempted", demo=demo.__name__, n=n, why=lab.t(f"bonus.{state}", n=n, names=names)))
    elif state == labtool.BONUS_INCOMPLETE:
        print(lab.t("bonus.incomplete", demo=demo.__name__, n=n, problems="; ".join(labtool.bonus_problems(pk, part))))
    return state == labtool.BONUS_ATTEMPTED


def demo5_prefix_cache(pk, lab):
    if not bonus_ready(pk, lab, "prefix_cache", demo5_prefix_cache):
        return
    lab.print_header(lab.t("demo5.title", system=SYSTEM5, question=QUESTION5, steps=STEPS5, bs=BS5))
    rows = []
    for R in (2, 4, 8):
        prompts = shared_prompts(lab, R)
        plain, cached = serve(pk, lab, prompts, False), serve(pk, lab, prompts, True)
        rows.append([R, f"{plain['computed']} / {cached['computed']}", f"{cached['hit'] / sum(map(len, prompts)):.1%}",
                     f"{plain['peak']} / {cached['peak']}", lab.same(plain["outputs"] == cached["outputs"]),
                     f"{max_difference(plain, cached):.1e}"])
    lab.print_table(lab.t("demo5.columns"), rows)
    pool, cache = cached["pool"], cached["cache"]
    for seq in cached["seqs"]:
        seq.free()
    chain, n_used, order = cache.lookup(prompts[0]), pool.n_used, []
    for _ in chain:                 # one block at a time: which one goes?
        cache.evict(1)
        order += [b for b in chain if b not in order and pool.refcount(b) == 0]
    print(lab.t("demo5.after", R=R, n_used=n_used, blocks=chain, n=len(chain), order=", ".join(map(str, order))))
    sys_blocks, prompt = SYSTEM5 // BS5, SYSTEM5 + QUESTION5
    per_request = -(-(prompt + STEPS5) // BS5)
    lab.print_observations(lab.t("demo5.observations", sys_blocks=sys_blocks, prompt=prompt, question=QUESTION5,
                                 per_request=per_request, own=per_request - sys_blocks, n_blocks=POOL5),
                           lab.t("observations"))


REQUESTS6, PROMPT6, SAMPLES6, NEW6, SLOTS6 = 6, 37, 2, 24, 256


def demo6_swap(pk, lab):
    if not bonus_ready(pk, lab, "swap", demo6_swap):
        return
    from scheduler import RECOMPUTE, SWAP, serve
    T, rng = lab.TINY, np.random.default_rng(6)
    prompts = [rng.integers(0, T.vocab, PROMPT6) for _ in range(REQUESTS6)]
    lab.print_header(lab.t("demo6.title", R=REQUESTS6, prompt=PROMPT6, n=SAMPLES6, new=NEW6, slots=SLOTS6))
    rows = []
    for B in (4, 8, 16, 32):
        ample, st = serve(pk, lab.PARAMS, T, prompts, SAMPLES6, NEW6, 2 * REQUESTS6 * SLOTS6 // B, B)
        out = {how: serve(pk, lab.PARAMS, T, prompts, SAMPLES6, NEW6, SLOTS6 // B, B, how) for how in (SWAP, RECOMPUTE)}
        swap, rec = out[SWAP][1], out[RECOMPUTE][1]
        rows.append([B, f"{SLOTS6 // B} ({st['peak']})", swap["preemptions"], f"{swap['out']} + {swap['in']}",
                     rec["recomputed"], f"{swap['steps']} ({st['steps']})",
                     f"{lab.same(out[SWAP][0] == ample)} / {lab.same(out[RECOMPUTE][0] == ample)}"])
    lab.print_table(lab.t("demo6.columns"), rows)
    lab.print_observations(lab.t("demo6.observations", slots=SLOTS6, n=SAMPLES6), lab.t("observations"))


DEMOS = [demo1_block_table, demo2_equivalence, demo3_parallel_sampling, demo4_beam_search]
# The bonus's demos. tools/build_handout.py drops the lines below (they end with "# bonus") when the course
# switches the bonus off: then every file gets the lecture's four demos and no word of the others.
DEMOS.append(demo5_prefix_cache)  # bonus
DEMOS.append(demo6_swap)  # bonus


class _Lab:
    """The given modules and the demos' words, gathered so each demo reads like the lecture."""

    def __init__(self, lang="en"):
        import console
        import transformer_lab as tl
        self.TINY, self.KVCache, self.forward, self.attention_core = tl.TINY, tl.KVCache, tl.forward, tl.attention_core
        self.PARAMS = tl.init_params(tl.TINY, seed=0)
        self.print_header, self.print_table, self.print_observations = (
            console.print_header, console.print_table, console.print_observations)
        self.text = TEXTS[lang]

    def t(self, key, **fields):
        """The text `key` in this language, its {fields} filled in (a list: each item)."""
        text = self.text[key]
        return [item.format(**fields) for item in text] if isinstance(text, list) else text.format(**fields)

    def same(self, equal):
        return self.t("identical" if equal else "different")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default=os.path.join(HERE, "..", "starter"),
                    help="directory holding paged_kv.py (default: starter)")
    ap.add_argument("--lang", default=os.environ.get("LANG", ""),
                    help="zh... for Chinese, anything else for English (default: $LANG)")
    args = ap.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):       # Chinese prints whatever the locale's encoding
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8")
    lab = _Lab(language(args.lang))
    sys.path[:0] = [os.path.abspath(args.impl), HERE]
    try:
        import paged_kv as pk
    except Exception as e:  # a broken file still gets a readable message, not a traceback wall
        print(lab.t("cannot_import", path=os.path.join(args.impl, "paged_kv.py"), error=f"{type(e).__name__}: {e}"))
        return 1
    for demo in DEMOS:
        parts = lab.t(demo.__name__.split("_")[0] + ".parts")
        try:
            demo(pk, lab)
        except NotImplementedError as e:
            print(lab.t("not_implemented", demo=demo.__name__, parts=parts, error=e))
        except Exception:
            print(lab.t("crashed", demo=demo.__name__, parts=parts))
            traceback.print_exc(limit=-3, file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
