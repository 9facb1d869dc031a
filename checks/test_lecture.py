"""The lecture's four demos on the reference. Expected values are the lecture's own numbers (or
derived from its setup: prompt lengths, block sizes, the copy-on-write rule), never the code's."""
import math
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import demo as lab_demo
import paged_kv as pk
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


# ================================================================== lab/demo.py
def test_demo_py_on_reference():
    code, out = run(["lab/demo.py", "--impl", "solution"])
    assert code == 0, out[-3000:]
    for n in (1, 2, 3, 4):
        assert out.count(f"Demo {n}:") == 1, f"Demo {n} header missing:\n{out[-3000:]}"
    for bad in ("Traceback", "crashed", "not implemented", "DIFFERENT"):
        assert bad not in out, f"{bad!r} in the output of lab/demo.py --impl solution:\n{out[-3000:]}"
    assert "[0, 2, 4]" in out


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
    code, out = run(["lab/demo.py", "--impl", str(tmp_path)])
    assert code == 0, out[-3000:]
    assert "Traceback" not in out and "crashed" not in out, out[-3000:]
    for name in ("demo1_block_table", "demo2_equivalence", "demo3_parallel_sampling", "demo4_beam_search"):
        assert f"[{name}] not implemented yet" in out, f"{name} does not say 'not implemented yet':\n{out}"
