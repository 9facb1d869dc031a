"""The lecture's four demos, and the bonus parts' demos, on the reference. Expected values are the
lecture's own numbers (or derived from its setup: prompt lengths, block sizes, the copy-on-write rule;
for demo 6 a contiguous KVCache per request), never the code's."""
import math
import os
import re
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import demo as lab_demo
import demo_text
import paged_kv as pk
import registry
import transformer_lab as tl
from transformer_lab import TINY

ROOT = Path(__file__).resolve().parents[1]
LECTURE = ROOT.parent / "shared" / "seed" / "01_paged_attention.py"
PARAMS = tl.init_params(TINY, seed=0)


@pytest.fixture(autouse=True)
def reference_is_paged_kv(monkeypatch):
    """decoding imports `paged_kv` when called: make sure that is the reference."""
    monkeypatch.setitem(sys.modules, "paged_kv", pk)


def run(args, pythonpath=None):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    r = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


# ================================================================== the lecture script, unchanged
def test_lecture_script_runs_on_reference():
    if not LECTURE.exists():
        pytest.skip(f"the lecture script is not here ({LECTURE}): shared/ must sit beside the repository")
    code, out = run([os.path.relpath(LECTURE, ROOT)], pythonpath=os.pathsep.join(["solution", "lab"]))
    assert code == 0, f"the lecture script exited with {code}:\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    for n in (1, 2, 3, 4):
        assert f"演示 {n}：" in out, f"demo {n} header missing from the lecture's output"
    assert "[0, 2]" in out and "[0, 2, 4]" in out, "demo 1 block tables missing"
    assert "不同" not in out, "a demo reports outputs that differ from the baseline"


# ================================================================== demo 1
def test_demo1_tables_and_fills(capsys):
    lab_demo.demo1_block_table(pk, lab_demo._Lab())
    rows = [re.search(r"(\[[\d, ]*\])\s+(\d+)\s+(\d/4)$", line).groups()
            for line in capsys.readouterr().out.splitlines() if line.startswith(("prefill", "decode"))]
    assert rows == [("[0, 2]", "7", "3/4"), ("[0, 2]", "8", "4/4"), ("[0, 2, 4]", "9", "1/4")], rows


# ================================================================== demo 2
PROMPT_LENGTHS = (5, 17, 33, 64)


@lru_cache(maxsize=None)
def demo2(B):
    """The lecture's demo 2 for one block size: (blocks used, lengths, worst |paged - contiguous|)."""
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, TINY.vocab, L) for L in PROMPT_LENGTHS]
    pool = pk.BlockPool(TINY, n_blocks=260 // B + 8, block_size=B)
    seqs = [pk.PagedSequence(pool) for _ in prompts]
    refs = [tl.KVCache(TINY, 1) for _ in prompts]
    worst, chunks = 0.0, list(prompts)
    for _ in range(21):
        outs = pk.paged_step(PARAMS, TINY, seqs, chunks)
        new = []
        for c, o, r in zip(chunks, outs, refs):
            worst = max(worst, float(np.max(np.abs(o - tl.forward(PARAMS, TINY, c[None], cache=r)[0]))))
            new.append(np.array([int(np.argmax(o[-1]))]))
        chunks = new
    return pool.n_used, [s.length for s in seqs], worst


@pytest.mark.parametrize("B,blocks,waste", [(1, 199, "0.0%"), (4, 52, "4.3%"), (16, 15, "17.1%"), (64, 5, "37.8%")])
def test_demo2_blocks_and_waste(B, blocks, waste):
    used, lengths, worst = demo2(B)
    assert lengths == [L + 20 for L in PROMPT_LENGTHS] == [25, 37, 53, 84]
    assert sum(math.ceil(L / B) for L in lengths) == blocks, "the lecture's number follows from the lengths"
    assert used == blocks, f"block size {B}: {used} blocks used, the lecture has {blocks}"
    assert f"{1 - sum(lengths) / (used * B):.1%}" == waste
    assert worst <= 1e-15, f"block size {B}: max |paged - contiguous| = {worst:.1e}; the lecture says 1e-15"


def test_demo2_blockwise_attention():
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, TINY.vocab, L) for L in PROMPT_LENGTHS]
    pool = pk.BlockPool(TINY, n_blocks=16, block_size=8)
    s = pk.PagedSequence(pool)
    pk.paged_step(PARAMS, TINY, [s], [prompts[2]])
    q = rng.standard_normal((TINY.n_heads, TINY.d_head))
    K, V = s.read(1, s.length)
    d = float(np.max(np.abs(pk.blockwise_attention(q, s, 1) - tl.attention_core(q[None, None], K, V, 32)[0, 0])))
    assert (s.length, len(s.blocks)) == (33, 5)
    assert d <= 1e-12, f"blockwise vs concatenated: {d:.1e}"


# ================================================================== demo 3
PROMPT3, NEW3, BS = 100, 40, 16


@lru_cache(maxsize=None)
def demo3(n):
    prompt = np.random.default_rng(2).integers(0, TINY.vocab, PROMPT3)
    ref, _ = pk.parallel_sample(PARAMS, TINY, prompt, n, NEW3, 1.0, seed=7, pool=None)
    pool = pk.BlockPool(TINY, n_blocks=256, block_size=BS)
    out, st = pk.parallel_sample(PARAMS, TINY, prompt, n, NEW3, 1.0, seed=7, pool=pool)
    return ref, out, st, pool


@pytest.mark.parametrize("n", [2, 4, 6])
def test_demo3_parallel_sampling(n):
    ref, out, st, pool = demo3(n)
    assert out == ref, f"n={n}: samples with a pool differ from the pool=None baseline"
    assert pool.n_copies == n - 1, f"n={n}: {pool.n_copies} copies, the lecture says n - 1 = {n - 1}"
    assert (pool.n_used, pool.n_free) == (0, 256), "blocks left in use after parallel_sample"
    # the prompt's 7 blocks (6 full + 4 tokens) are shared; after t new tokens each sample holds
    # ceil((100 + t) / 16) blocks, of which the 6 full prompt blocks are shared by all
    lengths = [PROMPT3 + t for t in range(NEW3)]
    assert st["blocks_unshared"] == [n * math.ceil(L / BS) for L in lengths]
    assert st["blocks_used"] == [7] + [6 + n * (math.ceil(L / BS) - 6) for L in lengths[1:]]


def test_demo3_saving_grows_with_n():
    saving = [1 - sum(demo3(n)[2]["blocks_used"]) / sum(demo3(n)[2]["blocks_unshared"]) for n in (2, 4, 6)]
    assert 0 < saving[0] < saving[1] < saving[2] < 1, saving


# ================================================================== demo 4
PROMPT4, STEPS4 = 64, 32


@lru_cache(maxsize=None)
def demo4(k):
    prompt = np.random.default_rng(3).integers(0, TINY.vocab, PROMPT4)
    ref, st_ref = pk.beam_search(PARAMS, TINY, prompt, k, STEPS4, pool=None)
    pool = pk.BlockPool(TINY, n_blocks=512, block_size=BS)
    out, st = pk.beam_search(PARAMS, TINY, prompt, k, STEPS4, pool=pool)
    saving = 1 - sum(st["blocks_used"]) / sum(st["blocks_unshared"])
    return ref, st_ref, out, st, pool, saving


@pytest.mark.parametrize("k", [2, 4, 6])
def test_demo4_beam_search(k):
    ref, st_ref, out, st, pool, saving = demo4(k)
    assert [t for _, t in out] == [t for _, t in ref], f"k={k}: beams differ from the baseline"
    assert np.allclose([s for s, _ in out], [s for s, _ in ref], rtol=0, atol=1e-9)
    # baseline: at step s every one of the k children copies a parent holding 64 + s tokens
    assert st_ref["copied_tokens"] == k * sum(PROMPT4 + s for s in range(STEPS4))
    assert st_ref["copied_tokens"] > pool.n_copies * BS, "paging must copy less than full copies"
    assert 0.30 <= saving <= 0.75, f"k={k}: saving {saving:.1%}, lecture: 39%-68%"
    final = math.ceil((PROMPT4 + STEPS4) / BS)
    assert pool.peak_used == max(st["blocks_used"]), "peak is reached at the end of some step"
    assert final <= pool.peak_used <= max(st["blocks_unshared"]) <= k * final
    assert pool.n_used == 0, "blocks left in use after beam_search"


def test_demo4_saving_grows_with_k():
    saving = [demo4(k)[5] for k in (2, 4, 6)]
    assert saving[0] < saving[1] < saving[2], saving


# ================================================================== demo 5 (bonus): a shared system prompt
S5, Q5, D5, B5 = lab_demo.SYSTEM5, lab_demo.QUESTION5, lab_demo.STEPS5, lab_demo.BS5
L5 = S5 + Q5


@lru_cache(maxsize=None)
def demo5(R):
    lab = lab_demo._Lab()
    prompts = lab_demo.shared_prompts(lab, R)
    return prompts, lab_demo.serve(pk, lab, prompts, False), lab_demo.serve(pk, lab, prompts, True)


@pytest.mark.parametrize("R", [2, 4, 8])
def test_demo5_figures(R):
    """From the setup alone: the system prompt fills S5 / B5 blocks exactly, so every request after
    the first hits all of them and computes its question; after D5 decodes each request holds
    ceil((L5 + D5) / B5) blocks, of which the system prompt's are shared."""
    prompts, plain, cached = demo5(R)
    assert S5 % B5 == 0 and Q5 < B5
    assert all(len(p) == L5 and list(p[:S5]) == list(prompts[0][:S5]) for p in prompts)
    assert len({tuple(p[S5:]) for p in prompts}) == R, "each request has its own question"
    assert (plain["computed"], cached["computed"]) == (R * L5, L5 + (R - 1) * Q5)
    assert (plain["hit"], cached["hit"]) == (0, (R - 1) * S5)
    per_request, shared = math.ceil((L5 + D5) / B5), S5 // B5
    assert (plain["peak"], cached["peak"]) == (R * per_request, shared + R * (per_request - shared))
    assert cached["outputs"] == plain["outputs"], "the cache changed the outputs"
    assert lab_demo.max_difference(plain, cached) <= 1e-10


@pytest.mark.parametrize("R", [2, 8])
def test_demo5_logits_equal_the_contiguous_forward(R):
    prompts, _, cached = demo5(R)
    for i, (prompt, rows, tokens) in enumerate(zip(prompts, cached["logits"], cached["outputs"])):
        kv = tl.KVCache(TINY, 1)
        full = tl.forward(PARAMS, TINY, prompt[None], cache=kv)[0]
        assert len(rows[0]) == (L5 if i == 0 else Q5)
        assert np.max(np.abs(rows[0] - full[L5 - len(rows[0]):])) <= 1e-10, f"request {i}: prefill logits"
        for step in range(D5):
            expected = tl.forward(PARAMS, TINY, np.array([[tokens[step]]]), cache=kv)[0]
            assert np.max(np.abs(rows[step + 1] - expected)) <= 1e-10, f"request {i}: decode {step}"


def test_demo5_prints_the_figures(capsys):
    lab_demo.demo5_prefix_cache(pk, lab_demo._Lab())
    out = capsys.readouterr().out
    for R in (2, 4, 8):
        per_request = math.ceil((L5 + D5) / B5)
        row = re.search(rf"^ +{R}  (.*)$", out, re.M)
        assert row, f"no row for R={R}:\n{out}"
        cells = row.group(1).split()
        assert " ".join(cells[:3]) == f"{R * L5} / {L5 + (R - 1) * Q5}", cells
        assert cells[3] == f"{(R - 1) * S5 / (R * L5):.1%}"
        assert " ".join(cells[4:7]) == f"{R * per_request} / {S5 // B5 + R * (per_request - S5 // B5)}"
        assert cells[7] == "identical", cells
    chain = list(range(S5 // B5))            # the first request on a fresh pool, lowest free first
    assert f"{S5 // B5} blocks are still in use" in out
    assert f"releases blocks {', '.join(map(str, chain[::-1]))}: the tail" in out


# ================================================================== demo 6 (bonus): preemption
def sampled_contiguously(prompt, number, n, new, seed=0):
    """A request's n samples decoded on a contiguous KVCache each, with the scheduler's random streams
    (request, sample, position): what any schedule must give."""
    from decoding import _sample
    out = []
    for j in range(n):
        kv, tokens = tl.KVCache(TINY, 1), []
        logits = tl.forward(PARAMS, TINY, np.asarray(prompt)[None], cache=kv)[0, -1]
        for t in range(new):
            tokens.append(_sample(logits, 1.0, np.random.default_rng([seed, number, j, t])))
            logits = tl.forward(PARAMS, TINY, np.array([[tokens[-1]]]), cache=kv)[0, -1]
        out.append(tokens)
    return out


@pytest.mark.parametrize("B", [4, 16])
def test_demo6_preempts_and_gives_every_request_its_own_outputs(B):
    """A pool of 256 token slots for 6 requests of 2 samples: both ways preempt, the same groups at the same
    steps, and every request's samples are those of its own contiguous decoding; swapping moves each block
    it took out back in, and recomputation recomputes at least one prompt per preemption."""
    from scheduler import RECOMPUTE, SWAP, serve
    rng = np.random.default_rng(6)
    prompts = [rng.integers(0, TINY.vocab, lab_demo.PROMPT6) for _ in range(lab_demo.REQUESTS6)]
    want = [sampled_contiguously(p, i, lab_demo.SAMPLES6, lab_demo.NEW6) for i, p in enumerate(prompts)]
    runs = {how: serve(pk, PARAMS, TINY, prompts, lab_demo.SAMPLES6, lab_demo.NEW6, lab_demo.SLOTS6 // B, B, how)
            for how in (SWAP, RECOMPUTE)}
    (swapped, s), (recomputed, r) = runs[SWAP], runs[RECOMPUTE]
    assert swapped == recomputed == want
    assert s["preemptions"] == r["preemptions"] > 0 and s["steps"] == r["steps"]
    assert s["out"] == s["in"] > 0 and r["recomputed"] >= r["preemptions"] * lab_demo.PROMPT6
    assert s["peak"] <= lab_demo.SLOTS6 // B and r["peak"] <= lab_demo.SLOTS6 // B


# ================================================================== lab/demo.py, both languages
@lru_cache(maxsize=None)
def demo_output(*args):
    return run(["lab/demo.py", *args])


def test_demo_py_on_reference():
    code, out = demo_output("--impl", "solution", "--lang", "en")
    assert code == 0, out[-3000:]
    for n in range(1, len(lab_demo.DEMOS) + 1):
        assert out.count(f"Demo {n}:") == 1, f"Demo {n} header missing:\n{out[-3000:]}"
    for bad in ("Traceback", "crashed", "not implemented", "DIFFERENT"):
        assert bad not in out, f"{bad!r} in the output of lab/demo.py --impl solution:\n{out[-3000:]}"
    assert "[0, 2, 4]" in out


NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def test_demo_py_in_chinese_has_the_same_numbers():
    """Every figure, in the same amounts: the texts agree on their numbers and the rest are the
    same computed values."""
    code, zh = demo_output("--impl", "solution", "--lang", "zh")
    assert code == 0, zh[-3000:]
    for n in range(1, len(lab_demo.DEMOS) + 1):
        assert zh.count(f"演示 {n}：") == 1, f"演示 {n} missing:\n{zh[-3000:]}"
    for english in ("Demo ", "Observations", "identical", "DIFFERENT", "Traceback", "not implemented", "不同"):
        assert english not in zh, f"{english!r} in the Chinese output"
    assert zh.count("观察：") == len(lab_demo.DEMOS) and "块表" in zh and "写时复制" in zh and "相同" in zh
    en = demo_output("--impl", "solution", "--lang", "en")[1]
    assert Counter(NUMBER.findall(zh)) == Counter(NUMBER.findall(en))


def test_demo_texts_agree():
    """Same keys, same kinds, same {fields}, same numbers: nothing said in one language only."""
    en, zh = demo_text.TEXTS["en"], demo_text.TEXTS["zh"]
    assert set(demo_text.TEXTS) == {"en", "zh"} and en.keys() == zh.keys()
    fields = re.compile(r"\{(\w*)\}")
    for key in en:
        assert type(en[key]) is type(zh[key]), key
        pairs = zip(en[key], zh[key]) if isinstance(en[key], list) else [(en[key], zh[key])]
        assert not isinstance(en[key], list) or len(en[key]) == len(zh[key]), key
        for e, z in pairs:
            assert sorted(fields.findall(e)) == sorted(fields.findall(z)), f"{key}: fields differ"
            assert Counter(NUMBER.findall(e)) == Counter(NUMBER.findall(z)), f"{key}: numbers differ:\n{e}\n{z}"
            assert not re.search(r"[\u4e00-\u9fff]", e), f"{key}: Chinese in the English text"
            assert re.search(r"[\u4e00-\u9fff]", z), f"{key}: no Chinese in the Chinese text"


@pytest.mark.parametrize("name,lang", [("zh", "zh"), ("zh_CN.UTF-8", "zh"), ("zh_TW", "zh"), ("ZH", "zh"),
                                       ("", "en"), (None, "en"), ("C", "en"), ("C.UTF-8", "en"),
                                       ("en_US.UTF-8", "en"), ("de_DE", "en"), ("xzh", "en")])
def test_language_follows_gettext(name, lang):
    assert demo_text.language(name) == lang


STUB = '''"""Stubs: every name of the contract raises NotImplementedError."""
from decoding import beam_search, parallel_sample  # noqa: F401


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        raise NotImplementedError("Part 1: BlockPool")

    def alloc(self):
        raise NotImplementedError("Part 1: alloc")

    def incref(self, b):
        raise NotImplementedError("Part 1: incref")

    def decref(self, b):
        raise NotImplementedError("Part 1: decref")

    def refcount(self, b):
        raise NotImplementedError("Part 1: refcount")

    def copy_block(self, b):
        raise NotImplementedError("Part 1: copy_block")

    @property
    def n_used(self):
        raise NotImplementedError("Part 1: n_used")

    @property
    def n_free(self):
        raise NotImplementedError("Part 1: n_free")


class PagedSequence:
    def __init__(self, pool):
        raise NotImplementedError("Part 2: PagedSequence")

    def reserve(self, n):
        raise NotImplementedError("Part 2: reserve")

    def write(self, layer, start, k, v):
        raise NotImplementedError("Part 2: write")

    def read(self, layer, length):
        raise NotImplementedError("Part 2: read")

    def fork(self):
        raise NotImplementedError("Part 4: fork")

    def free(self):
        raise NotImplementedError("Part 2: free")


def paged_step(params, cfg, seqs, chunks):
    raise NotImplementedError("Part 2: paged_step")


def blockwise_attention(q, seq, layer):
    raise NotImplementedError("Part 3: blockwise_attention")
'''


def test_demo_py_on_stubs(tmp_path):
    (tmp_path / "paged_kv.py").write_text(STUB)
    code, out = run(["lab/demo.py", "--impl", str(tmp_path), "--lang", "en"])
    assert code == 0, out[-3000:]
    assert "Traceback" not in out and "crashed" not in out, out[-3000:]
    for name in ("demo1_block_table", "demo2_equivalence", "demo3_parallel_sampling", "demo4_beam_search"):
        assert f"[{name}] not implemented yet" in out, f"{name} does not say 'not implemented yet':\n{out}"
    for demo, part in BONUS_DEMOS:
        absent = f"[{demo.__name__}] bonus not attempted: paged_kv.py defines no {' and no '.join(part.top)}"
        assert out.count(absent) == 1, out


BONUS_DEMOS = [(d, SimpleNamespace(number=p.number, top=registry.top_names(p.id))) for d in lab_demo.DEMOS
               for p in registry.bonus() if d.__name__.startswith(f"demo{p.number}_")]   # demo N for Part N


def test_demo_py_on_the_starter():
    code, out = run(["lab/demo.py", "--impl", "starter", "--lang", "en"])
    assert code == 0 and "Traceback" not in out, out[-3000:]
    assert out.count("not implemented yet") == 4, out           # demos 1-4; the bonus demos: not attempted
    for demo, _ in BONUS_DEMOS:
        assert out.count(f"[{demo.__name__}] bonus not attempted: its stubs still raise NotImplementedError") == 1, out


def test_demo_py_without_the_bonus_parts(tmp_path):
    """A submission written before the bonus existed: the lecture's four demos, and each bonus demo says in
    one line that its part is not attempted (a course without the bonus: checks/test_handout.py)."""
    text = (ROOT / "solution" / "paged_kv.py").read_text()
    first = min(registry.number(p.id) for p in registry.bonus())
    cut = text.index(f"\n# ---------------------------------------------------------------- Part {first} (bonus)")
    (tmp_path / "paged_kv.py").write_text(text[:cut] + "\n")
    code, out = run(["lab/demo.py", "--impl", str(tmp_path), "--lang", "en"])
    assert code == 0, out[-3000:]
    for n in (1, 2, 3, 4):
        assert out.count(f"Demo {n}:") == 1
    assert "Traceback" not in out and "DIFFERENT" not in out and "not implemented yet" not in out
    assert out.count("bonus") == len(BONUS_DEMOS) == len(registry.bonus())
    for demo, part in BONUS_DEMOS:
        assert f"Demo {part.number}:" not in out
        assert f"[{demo.__name__}] bonus not attempted: paged_kv.py defines no {' and no '.join(part.top)}" in out


@pytest.mark.parametrize("env_lang,word", [("zh_CN.UTF-8", "还没有实现"), ("C.UTF-8", "not implemented yet")])
def test_demo_language_from_lang_and_utf8_whatever_the_locale(tmp_path, env_lang, word):
    """No --lang: $LANG decides. Chinese prints even when Python would pick ASCII for stdout."""
    (tmp_path / "paged_kv.py").write_text(STUB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
    env.update(LANG=env_lang, PYTHONIOENCODING="ascii")
    r = subprocess.run([sys.executable, "lab/demo.py", "--impl", str(tmp_path)], cwd=ROOT, env=env,
                       capture_output=True, timeout=120)
    out = r.stdout.decode("utf-8")
    assert r.returncode == 0 and "Traceback" not in out, out + r.stderr.decode(errors="replace")
    assert out.count(word) == 4, out        # the stubs have no Part 5: demo 5 says "bonus not attempted"
