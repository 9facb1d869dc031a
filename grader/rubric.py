"""The rubric: every hidden check, its part, its points and the handout section to read.

The one place points live. assignment.md's grading table is tested equal to it, and the hidden
suites take their check ids from it (a check that never reports scores 0: see score.py).
"""
from collections import namedtuple

Check = namedtuple("Check", "id part points title section")

PARTS = ("allocator", "paged_step", "blockwise_attention", "copy_on_write")   # the 100 points
BONUS = True          # the course's switch for the bonus parts: False grades exactly Parts 1-4

SECTIONS = {
    "allocator": "Part 1: the block allocator",
    "paged_step": "Part 2: paged KV and the paged step",
    "blockwise_attention": "Part 3: blockwise attention",
    "copy_on_write": "Part 4: sharing and copy-on-write",
}

_RUBRIC = [
    ("allocator", [
        ("layout", 3, "new pool: attributes, storage shape, dtype and zeros, for any Config"),
        ("lowest_free_first", 5, "alloc returns the lowest free block, also after frees"),
        ("refcounts", 4, "incref / decref / refcount, n_used and n_free"),
        ("peak_used", 2, "peak_used is the largest n_used ever reached"),
        ("exhaustion", 3, "alloc on a full pool: MemoryError, pool unchanged"),
        ("bad_ids", 3, "bad or free block ids: ValueError, pool unchanged"),
        ("copy_block", 3, "copy_block: data in every layer, n_copies, full pool"),
        ("random_ops", 2, "long random operation sequences: same state as the reference"),
    ]),
    ("paged_step", [
        ("prefill", 4, "prefill logits equal the contiguous forward"),
        ("chunked_prefill", 3, "a prompt fed in chunks equals one-shot prefill"),
        ("decode_batches", 4, "decode steps and mixed prefill/decode batches"),
        ("tables", 4, "block tables, lengths, write and read, also on a fragmented pool"),
        ("configs", 4, "other Configs and block sizes from 1 to 64"),
        ("all_or_nothing", 4, "a step that does not fit: MemoryError, nothing changed"),
        ("exact_count", 3, "a step that needs exactly the free blocks succeeds"),
        ("bad_input", 4, "bad input: ValueError before anything changes"),
    ]),
    ("blockwise_attention", [
        ("boundaries", 5, "lengths k*B-1, k*B and k*B+1"),
        ("tables_layers", 5, "non-monotone block tables, every layer"),
        ("configs", 4, "other Configs and block sizes"),
        ("empty", 1, "length 0: ValueError"),
    ]),
    ("copy_on_write", [
        ("fork", 4, "fork shares every block and increments refcounts"),
        ("copy_when_needed", 5, "copy exactly when the last block is partial and shared"),
        ("n_minus_1", 4, "n forks writing make n - 1 copies"),
        ("copied_data", 4, "copied blocks hold the right K/V in every layer; shared data untouched"),
        ("free", 4, "free returns blocks; a freed sequence can be reused"),
        ("parallel_sampling", 5, "parallel sampling: same samples, blocks, peak and copies as the reference"),
        ("beam_search", 4, "beam search: same beams, blocks, peak and copies as the reference"),
    ]),
]

# Extra credit above TOTAL, graded like the rest; empty until a bonus part has hidden checks.
_BONUS_RUBRIC = []

BONUS_PARTS = tuple(part for part, _ in _BONUS_RUBRIC) if BONUS else ()
ALL_PARTS = PARTS + BONUS_PARTS
CHECKS = {f"{part}.{cid}": Check(f"{part}.{cid}", part, pts, title, SECTIONS[part])
          for part, checks in _RUBRIC + (_BONUS_RUBRIC if BONUS else []) for cid, pts, title in checks}
TOTAL = sum(c.points for c in CHECKS.values() if c.part in PARTS)
BONUS_TOTAL = sum(c.points for c in CHECKS.values() if c.part in BONUS_PARTS)
assert TOTAL == 100, TOTAL


def part_points(part):
    return sum(c.points for c in CHECKS.values() if c.part == part)
