"""No score can be bought (issue 14): a student who knows the grader fails a check of another part
on purpose to get a bug's points back. For a bug X and a sacrifice S in another part, each planted
in the reference and graded by `python -m grader` as a student's file is, the losses must add up:
loss(X + S) >= loss(X) + loss(S). Before no judge asked how another part fares (`deps.ok`), a
failing Part 2 check excused the drivers and the twins of Part 4, and these pairs scored MORE with
the sacrifice than without it."""
import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader import rubric
from grader.selftest import mutants

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solution" / "paged_kv.py"
FULL = rubric.TOTAL + rubric.BONUS_TOTAL
pytestmark = pytest.mark.slow

# Part 4: fork raises (a typo), so every sharing script and both drivers stop at the first fork.
FORK_RAISES = [("        child = PagedSequence(self.pool)\n",
                "        child = PagedSequence(self.pool)\n        child.parent = self.parent\n")]
# Part 4: paged_step writes and reads K/V through the table as it was before reserve's copy-on-write
# (the shared block, not its copy), plus the new blocks: no Part 2 check sees it, Part 4's twins do.
STALE_TABLE = [("    for seq, chunk in zip(seqs, chunks):\n        seq.reserve(len(chunk))\n",
                "    stale = [list(seq.blocks) for seq in seqs]\n"
                "    for seq, chunk in zip(seqs, chunks):\n        seq.reserve(len(chunk))\n"
                "    stale = [t + s.blocks[len(t):] for t, s in zip(stale, seqs)]\n"),
               ("        blocks, slots = _slots([seqs[i].blocks for i in idx], pool.block_size, 0, start + T)",
                "        blocks, slots = _slots([stale[i] for i in idx], pool.block_size, 0, start + T)")]
# Part 2 sacrifices: logits off by 1e-6 for chunks of 45 tokens or more (one prefill case, picked
# from what the feedback prints), and a read that zeroes what lies past the length (a tables case).
PREFILL_45 = [("        logits = unembed(params, cfg, x)\n",
               "        logits = unembed(params, cfg, x)\n        if T >= 45:\n            logits = logits + 1e-6\n")]
READ_ZEROES = [("        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]\n",
                "        k, v = self.pool.k[layer, b, s].copy(), self.pool.v[layer, b, s].copy()\n"
                "        k[self.length:], v[self.length:] = 0.0, 0.0\n        return k, v\n")]

# Part 2: a step whose block count ignores the copies (mutants.py); Part 1 sacrifice: copy_block does
# not count n_copies (a copy_block case failed).
COUNT_IGNORES_COPIES = list(mutants.BY_NAME["count_ignores_copies"].edits)
COPY_NOT_COUNTED = list(mutants.BY_NAME["copy_block_no_count"].edits)

PAIRS = {       # name: (bug X in its part, sacrifice S in another part)
    "fork raises + a prefill case failed": (("copy_on_write", FORK_RAISES), ("paged_step", PREFILL_45)),
    "K/V through the stale table + a tables and a prefill case failed":
        (("copy_on_write", STALE_TABLE), ("paged_step", READ_ZEROES + PREFILL_45)),
    "a count that ignores copies + a copy_block case failed":
        (("paged_step", COUNT_IGNORES_COPIES), ("allocator", COPY_NOT_COUNTED)),
}


def planted(edits, folder):
    text = REFERENCE.read_text()
    for find, replace in edits:
        assert text.count(find) == 1, find
        text = text.replace(find, replace)
    folder.mkdir(parents=True)
    (folder / "paged_kv.py").write_text(text)
    return folder / "paged_kv.py"


def losses(path, tmp):
    """{part: points lost} of one grading, and the total lost."""
    out = tmp / "results.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(path), "--results", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    tests = json.loads(out.read_text())["tests"]
    lost = {p: sum(t["max_score"] - t["score"] for t in tests if p in t["tags"]) for p in rubric.ALL_PARTS}
    return lost, sum(t["max_score"] - t["score"] for t in tests)


@pytest.mark.parametrize("name", list(PAIRS))
def test_a_sacrifice_in_another_part_buys_nothing(tmp_path, name):
    """X, S and X + S graded two at a time; each bug costs its own part, and together they cost no less
    than apart."""
    (x_part, x_edits), (s_part, s_edits) = PAIRS[name]
    subs = {"X": x_edits, "S": s_edits, "X + S": x_edits + s_edits}
    paths = [planted(edits, tmp_path / f"sub{i}") for i, edits in enumerate(subs.values())]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        (x_lost, x), (s_lost, s), (_, both) = pool.map(lambda p: losses(p, p.parent), paths)
    print(f"{name}: X loses {x:.2f}, S {s:.2f}, X + S {both:.2f}")
    assert x_lost[x_part] > 0 and s_lost[s_part] > 0, (x_lost, s_lost)    # each bug costs its own part
    assert both >= x + s - 1e-6, f"{name}: X + S loses {both:.2f}, X alone {x:.2f}, S alone {s:.2f}"
