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
    "prefix_cache": "Part 5 (bonus): shared prefix across requests",
}

_RUBRIC = [
    ("allocator", [
        ("layout", 3, "new pool: attributes, storage shape, dtype and zeros, for any Config"),
        ("lowest_free_first", 5, "alloc and copy_block take the lowest free block, also after frees"),
        ("refcounts", 4, "incref / decref / refcount, n_used and n_free"),
        ("peak_used", 2, "peak_used is the largest n_used ever reached"),
        ("exhaustion", 3, "alloc on a full pool: MemoryError, pool unchanged"),
        ("bad_ids", 3, "bad or free block ids: ValueError, pool unchanged"),
        ("copy_block", 3, "copy_block: a new block, source refcount unchanged, n_copies, full pool"),
        ("random_ops", 2, "long random operation sequences: same state as the reference"),
    ]),
    ("paged_step", [
        ("prefill", 4, "prefill logits equal the contiguous forward"),
        ("chunked_prefill", 3, "a prompt fed in chunks equals one-shot prefill"),
        ("decode_batches", 4, "decode steps and mixed batches: logits (computed from pool storage) and lengths"),
        ("tables", 4, "block tables up to renaming (a block exactly when needed, in list order), K/V stored and "
                      "read through them, on a used pool"),
        ("configs", 4, "other Configs and block sizes from 1 to 64: logits, tables up to renaming, K/V"),
        ("all_or_nothing", 4, "a step or reserve that does not fit: MemoryError, nothing changed"),
        ("exact_count", 3, "a step that needs exactly the free blocks succeeds (copies counted)"),
        ("bad_input", 4, "bad input: ValueError before anything changes"),
    ]),
    ("blockwise_attention", [
        ("boundaries", 5, "lengths k*B-1, k*B and k*B+1"),
        ("tables_layers", 5, "non-monotone block tables, every layer"),
        ("configs", 4, "other Configs and block sizes"),
        ("empty", 1, "length 0: ValueError"),
    ]),
    ("copy_on_write", [
        ("fork", 4, "fork shares the whole table: same blocks and length, each refcount + 1"),
        ("copy_when_needed", 5, "copy-on-write exactly when the last block is partly filled and shared"),
        ("n_minus_1", 3, "n holders of a partly filled block writing make n - 1 copies"),
        ("copied_data", 4, "K/V stored by the test read back through the tables after forks, copies and frees"),
        ("free", 4, "free gives every block back (refcount - 1); a freed sequence can be reused"),
        ("sharing_invariance", 3, "sharing changes no result: the same logits and K/V as without sharing"),
        ("parallel_sampling", 4, "parallel sampling: prompt blocks shared, n - 1 copies, no leak, savings within range"),
        ("beam_search", 3, "beam search: no leak, sharing never costs blocks, beams and savings within range"),
    ]),
]

# Extra credit above TOTAL, graded like the rest (BONUS switches it on and off).
_BONUS_RUBRIC = [
    ("prefix_cache", [
        ("hits", 2, "cached_prefill: the blocks it hits (named by what they were made for), rows computed, "
                    "n_hit_tokens, the lookup cap"),
        ("keys", 2, "lookup and insert: whole-prefix keys (a block after another prefix misses), insert's count, "
                    "the blocks cached"),
        ("logits", 2, "cached prefill logits equal your own prefill without the cache, also after the test "
                      "overwrote a hit block"),
        ("eviction", 2, "evict: which blocks stay cached (least recently used first, tail first, no cascade, held "
                        "blocks kept) and its count"),
        ("exhaustion", 1, "a full pool: cached_prefill evicts exactly the shortfall, never a hit; else MemoryError, "
                          "nothing changed"),
        ("errors", 1, "bad calls of cached_prefill, insert and evict: ValueError, nothing changed"),
    ]),
]


def _checks(bonus):
    return {f"{part}.{cid}": Check(f"{part}.{cid}", part, pts, title, SECTIONS[part])
            for part, checks in _RUBRIC + (_BONUS_RUBRIC if bonus else []) for cid, pts, title in checks}


def switch_bonus(on):
    """Set BONUS and everything derived from it (the module's names below). The course's switch is
    the line `BONUS = ...` above; this is for tests that grade both ways in one checkout."""
    global BONUS, BONUS_PARTS, ALL_PARTS, CHECKS, TOTAL, BONUS_TOTAL, SWITCHED_OFF
    BONUS = bool(on)
    BONUS_PARTS = tuple(part for part, _ in _BONUS_RUBRIC) if BONUS else ()
    ALL_PARTS = PARTS + BONUS_PARTS
    CHECKS = _checks(BONUS)
    SWITCHED_OFF = frozenset(_checks(True)) - frozenset(CHECKS)     # check ids of bonus parts switched off
    TOTAL = sum(c.points for c in CHECKS.values() if c.part in PARTS)
    BONUS_TOTAL = sum(c.points for c in CHECKS.values() if c.part in BONUS_PARTS)
    assert TOTAL == 100, TOTAL


switch_bonus(BONUS)


def part_points(part):
    return sum(c.points for c in CHECKS.values() if c.part == part)
