"""Mutants of the reference: realistic student bugs, each written as data applied to the text of
solution/paged_kv.py.

    Mutant(name, part, bug, edits, witness, also)

`edits` is a list of (where, find, replace): `where` names the function or class the edit is made in
(its qualified name, "BlockPool.alloc"; "<head>" is the module's text before its first def or class,
"<module>" the whole text),
and `find` must occur EXACTLY ONCE in it, in the reference and after the earlier edits (`edited` asserts
it). So new code elsewhere in the reference (a line Part 6 repeats) never breaks a mutant, and a refactor
of the function itself breaks it loudly instead of silently turning it into a copy of the reference.
`part` is the rubric part whose points the bug must cost. `bug` says what is wrong and how
verify_corpus.py showed it differs from the contract (the observed difference, measured in-process
against the reference); `witness` names the check in verify_corpus.py that demonstrates it (that check
must fail on the mutant, and it is a check of `part`), or a hidden check of `part` (its registry id,
judged in process: inprocess.py), so that a new part needs no checks of its own in verify_corpus.py.

One bug, one charge: a mutant may cost points in `part` only, in the hidden grader and in the
public tests alike (selftest/cascade.py measures it, run.py enforces it). `also` names the other
parts a bug truly spans, when a part relies on what the contract lets it rely on and the bug breaks
exactly that (e.g. a copy_block that changes the source's refcount breaks copy-on-write's
refcounts); `bug` then says why, after "Spans". `checks`, when given, narrows the charge further: the
only rubric checks the bug may cost points in, and `tests` the only public tests (function names) it
may fail; e.g. an allocator whose only bug is its order may cost allocator.lowest_free_first alone.

Every mutant changes behaviour the contract specifies and grades: nothing here differs only in
error wording, wrong-type inputs, views vs copies, or other items of "What is not graded".
"""
import ast
import functools
import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REFERENCE = os.path.join(REPO, "solution", "paged_kv.py")
sys.path.insert(0, os.path.join(REPO, "tests"))
import registry  # noqa: E402    tests/registry.py

PARTS = tuple(p.id for p in registry.PARTS)


@dataclass(frozen=True)
class Mutant:
    name: str
    part: str
    bug: str
    edits: tuple
    witness: str = ""
    also: tuple = ()
    checks: tuple = ()
    tests: tuple = ()

    @property
    def parts(self):
        """Every part the bug may cost points in: its own first."""
        return (self.part, *self.also)


def reference_text():
    with open(REFERENCE, encoding="utf-8") as f:
        return f.read()


def writes_part(text, part):
    """Whether a paged_kv.py text of our own corpus defines one of the part's top-level names (a
    variant written before a bonus part existed does not, and is not judged on it)."""
    return any(f"class {n}" in text or f"def {n}(" in text for n in registry.top_names(part))


HEAD = "<head>"      # an anchor: the module's text before its first function or class (its imports)
MODULE = "<module>"  # an anchor: the whole text (a generated mutation's edit outside every function and class)


@functools.lru_cache(maxsize=16)
def scopes(text):
    """{anchor: (start, end)}: where each function and class of a Python text lies (from its first
    decorator's line to its last line, by character), named by its qualified name ("BlockPool.alloc"),
    and HEAD."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    found = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.setdefault(prefix + child.name, (starts[first - 1], starts[child.end_lineno]))
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)
    walk(ast.parse(text), "")
    found[HEAD] = (0, min((start for start, _ in found.values()), default=len(text)))
    found[MODULE] = (0, len(text))
    return found


def anchor_of(text, find):
    """The innermost function or class of `text` holding `find` (once in it), else HEAD, else MODULE:
    the anchor an edit made by a program gets (generate.py)."""
    start = text.index(find)
    inner = [(s, name) for name, (s, e) in scopes(text).items()
             if name != MODULE and s <= start and start + len(find) <= e]
    return max(inner)[1] if inner else MODULE


def edited(text, edits, label="edits"):
    """`text` with each (where, find, replace) applied in order, `find` replaced inside the function or
    class `where` names; it must occur exactly once there, in `text` and after the earlier edits."""
    original = text
    for where, find, replace in edits:
        spans = [scopes(t).get(where) for t in (original, text)]
        counts = [t[span[0]:span[1]].count(find) if span else "no" for t, span in zip((original, text), spans)]
        assert counts == [1, 1], (f"{label}: {find!r} occurs {counts[0]} times in {where} of the reference and "
                                  f"{counts[1]} times after the earlier edits (must be exactly once)")
        start, end = spans[1]
        text = text[:start] + text[start:end].replace(find, replace) + text[end:]
    return text


def apply(mutant, text=None):
    """The mutant's source: the reference (or `text`) with every edit applied (edited)."""
    original = reference_text() if text is None else text
    text = edited(original, mutant.edits, f"mutant {mutant.name}")
    assert text != original, f"mutant {mutant.name} changes nothing"
    return text


M = Mutant
_ALLOC_HEAD = ("        if not self._free:\n"
               "            raise MemoryError(f\"all {self.n_blocks} blocks are in use\")\n")
_IN_USE_RANGE = ("        if not 0 <= b < self.n_blocks:\n"
                 "            raise ValueError(f\"block id {b} is outside [0, {self.n_blocks})\")\n"
                 "        if self._ref[b] == 0:")
_REFCOUNT_RANGE = ("        if not 0 <= b < self.n_blocks:\n"
                   "            raise ValueError(f\"block id {b} is outside [0, {self.n_blocks})\")\n"
                   "        return self._ref[b]")
_COPY_HEAD = "        b = self._in_use(b)\n        new = self.alloc()\n"
_DECREF_HEAD = "        b = self._in_use(b)\n        self._ref[b] -= 1\n"
_ORDER_ONLY = {"checks": ("allocator.lowest_free_first",), "tests": ("test_alloc_hands_out_the_lowest_free_block",)}
_BW_SCORES = 'scores.append(np.einsum("hd,mhd->hm", q, seq.pool.k[layer, b, :m]) / np.sqrt(q.shape[-1]))'

MUTANTS = [
    # ------------------------------------------------------------------ Part 1: the block allocator
    M("alloc_highest_first", "allocator",
      "The free list is a plain stack: alloc pops the END of [0..n-1], so a fresh pool hands out n-1 first "
      "(vLLM 0.2.0's pop()). Verified: a fresh 8-block pool's first alloc returns 7, the contract says 0.",
      (("BlockPool.alloc", "b = heapq.heappop(self._free)", "b = self._free.pop()"),
       ("BlockPool.decref", "heapq.heappush(self._free, b)", "self._free.append(b)")), "a_order", **_ORDER_ONLY),
    M("alloc_lifo_reuse", "allocator",
      "Free list kept as a stack seeded high-to-low: fresh allocs are 0,1,2... but a freed block is reused "
      "LIFO. Verified: alloc 0..4, decref 4,0,2, then alloc returns 2 (contract: 0, the lowest free).",
      (("BlockPool.__init__", "self._free = list(range(n_blocks))", "self._free = list(range(n_blocks - 1, -1, -1))"),
       ("BlockPool.alloc", "b = heapq.heappop(self._free)", "b = self._free.pop()"),
       ("BlockPool.decref", "heapq.heappush(self._free, b)", "self._free.append(b)")), "a_order", **_ORDER_ONLY),
    M("alloc_fifo_reuse", "allocator",
      "Free list is a FIFO queue (nano-vllm's deque): freed blocks go to the back. Verified: alloc 0..4 of 8, "
      "decref 4,0,2, then alloc returns 5 (contract: 0).",
      (("BlockPool.alloc", "b = heapq.heappop(self._free)", "b = self._free.pop(0)"),
       ("BlockPool.decref", "heapq.heappush(self._free, b)", "self._free.append(b)")), "a_order", **_ORDER_ONLY),
    M("alloc_set_pop", "allocator",
      "The free blocks are a set and alloc takes set.pop(): a fresh pool hands out 0, 1, 2, ... but set.pop() "
      "resumes where it stopped, so freed blocks are not reused lowest first. Verified: alloc 0..4 of 8, decref "
      "4, 0, 2, then allocs return 5, 6, 7, 2 (contract: 0, 2, 4, 5).",
      (("BlockPool.__init__", "self._free = list(range(n_blocks))", "self._free = set(range(n_blocks))"),
       ("BlockPool.alloc", "b = heapq.heappop(self._free)", "b = self._free.pop()"),
       ("BlockPool.decref", "heapq.heappush(self._free, b)", "self._free.add(b)")), "a_order", **_ORDER_ONLY),
    M("decref_leaks_block", "allocator",
      "decref to 0 decrements n_used but never returns the block to the free list (a leak). Verified: 8-block "
      "pool, alloc 0..4, decref 4,0,2: the next allocs return 5, 6, 7 and then MemoryError with n_free 3.",
      (("BlockPool.decref", "            heapq.heappush(self._free, b)\n", ""),), "a_order"),
    M("decref_frees_at_one", "allocator",
      "Off by one in decref: the block is freed when its refcount drops to 1 instead of 0. Verified: alloc, "
      "incref twice, decref twice -> n_used is 0 while refcount is 1 (contract: n_used 1), and the block is "
      "handed out again by the next alloc.",
      (("BlockPool.decref", "        self._ref[b] -= 1\n        if self._ref[b] == 0:", "        self._ref[b] -= 1\n        if self._ref[b] == 1:"),),
      "a_refcount"),
    M("n_used_counts_refs", "allocator",
      "n_used sums the refcounts (double-counts shared blocks) instead of counting blocks in use. Verified: "
      "one block with refcount 3 reports n_used 3 (contract: 1).",
      (("BlockPool.n_used", "return self._used\n", "return sum(self._ref)\n"),), "a_refcount"),
    M("used_not_decremented", "allocator",
      "decref frees the block but forgets n_used -= 1, so n_used/n_free drift. Verified: alloc 4, decref 2 -> "
      "n_used 4, n_free 2 (contract: 2 and 4).",
      (("BlockPool.decref", "            self._used -= 1\n", ""),), "a_counts_peak"),
    M("peak_never_updated", "allocator",
      "peak_used is never updated after __init__. Verified: after 4 allocs peak_used is 0 (contract: 4).",
      (("BlockPool.alloc", "        self.peak_used = max(self.peak_used, self._used)\n", ""),), "a_counts_peak"),
    M("peak_follows_decref", "allocator",
      "decref sets peak_used = n_used when a block is freed (peak confused with current use). Verified: alloc "
      "4, decref 2 -> peak_used 2 (contract: 4, the largest n_used ever).",
      (("BlockPool.decref", "heapq.heappush(self._free, b)", "heapq.heappush(self._free, b)\n            self.peak_used = self._used"),),
      "a_counts_peak"),
    M("peak_counts_allocs", "allocator",
      "peak_used counts every alloc ever made instead of the largest n_used. Verified: alloc 4, decref 2, alloc 1 "
      "-> peak_used 5 (contract: 4).",
      (("BlockPool.alloc", "self.peak_used = max(self.peak_used, self._used)", "self.peak_used += 1"),), "a_counts_peak"),
    M("peak_reset_when_empty", "allocator",
      "peak_used is reset to 0 when the pool becomes empty. Verified: alloc 6 then decref all -> peak_used 0 "
      "(contract: 6; also the drivers' final peak differs).",
      (("BlockPool.decref", "heapq.heappush(self._free, b)",
        "heapq.heappush(self._free, b)\n            if self._used == 0:\n                self.peak_used = 0"),),
      "a_counts_peak"),
    M("alloc_returns_minus1", "allocator",
      "alloc on a full pool returns -1 (C style) instead of raising MemoryError. Verified: 3-block pool, 4th "
      "alloc returns -1, no MemoryError.",
      (("BlockPool.alloc", _ALLOC_HEAD, "        if not self._free:\n            return -1\n"),), "a_exhaust"),
    M("alloc_returns_none", "allocator",
      "alloc on a full pool returns None instead of raising MemoryError. Verified: 4th alloc of a 3-block pool "
      "returns None.",
      (("BlockPool.alloc", _ALLOC_HEAD, "        if not self._free:\n            return None\n"),), "a_exhaust"),
    M("alloc_counts_before_check", "allocator",
      "alloc bumps n_used before checking for a free block, so a failed alloc changes the pool. Verified: "
      "full 3-block pool, two failed allocs raise MemoryError but leave n_used 5, n_free -2 (contract: unchanged).",
      (("BlockPool.alloc", _ALLOC_HEAD + "        b = heapq.heappop(self._free)\n        self._ref[b] = 1\n        self._used += 1\n",
        "        self._used += 1\n" + _ALLOC_HEAD + "        b = heapq.heappop(self._free)\n        self._ref[b] = 1\n"),),
      "a_exhaust"),
    M("copy_block_no_v", "copy_on_write",
      "copy_block copies K but not V. Verified: after copy_block(1) -> 0, v[:, 0] still holds block 0's old "
      "data (contract: equal to v[:, 1] in every layer). Part 4 owns that a copied block holds its source's K/V.",
      (("BlockPool.copy_block", "        self.v[:, new] = self.v[:, b]\n", ""),), "c_copy_data"),
    M("copy_block_layer0", "copy_on_write",
      "copy_block copies only layer 0. Verified (3-layer Config): k[1:, new] differs from k[1:, src].",
      (("BlockPool.copy_block", "self.k[:, new] = self.k[:, b]", "self.k[0, new] = self.k[0, b]"),
       ("BlockPool.copy_block", "self.v[:, new] = self.v[:, b]", "self.v[0, new] = self.v[0, b]")), "c_copy_data"),
    M("copy_block_decrefs_source", "allocator",
      "copy_block also drops the source's reference (it thinks it does the whole copy-on-write). Verified: "
      "alloc b, copy_block(b) -> refcount(b) 0 (contract: source refcount unchanged, 1).",
      (("BlockPool.copy_block", "        self.n_copies += 1\n", "        self.n_copies += 1\n        self.decref(b)\n"),), "a_copy"),
    M("copy_block_increfs_source", "allocator",
      "copy_block increments the source's refcount. Verified: alloc b, copy_block(b) -> refcount(b) 2 "
      "(contract: 1).",
      (("BlockPool.copy_block", "        self.n_copies += 1\n", "        self.n_copies += 1\n        self.incref(b)\n"),), "a_copy"),
    M("copy_block_no_count", "allocator",
      "copy_block never increments n_copies. Verified: after a copy n_copies is 0 (contract: 1).",
      (("BlockPool.copy_block", "        self.n_copies += 1\n", ""),), "a_copy"),
    M("copy_block_counts_first", "allocator",
      "copy_block increments n_copies before allocating, so a copy on a full pool changes state. Verified: "
      "full 2-block pool, copy_block(0) raises MemoryError but n_copies becomes 1 (contract: 0).",
      (("BlockPool.copy_block", "        self.n_copies += 1\n", ""), ("BlockPool.copy_block", _COPY_HEAD, "        b = self._in_use(b)\n        self.n_copies += 1\n"
                                                       "        new = self.alloc()\n")), "a_copy_full"),
    M("copy_block_no_validation", "allocator",
      "copy_block does not check that the source is a valid block in use. Verified: copy_block of a free "
      "block succeeds (contract: ValueError, pool unchanged).",
      (("BlockPool.copy_block", _COPY_HEAD, "        b = int(b)\n        new = self.alloc()\n"),), "a_free_block_ops"),
    M("negative_id_wraps", "allocator",
      "incref/decref/copy_block check only b < n_blocks, so -1 wraps to the last block (Python indexing). "
      "Verified: full 4-block pool, incref(-1) returns normally (contract: ValueError, pool unchanged).",
      (("BlockPool._in_use", _IN_USE_RANGE, _IN_USE_RANGE.replace("0 <= b <", "b <")),), "a_bad_ids"),
    M("refcount_negative_wraps", "allocator",
      "refcount checks only b < n_blocks, so refcount(-1) returns the last block's count. Verified: full "
      "4-block pool, refcount(-1) returns 1 (contract: ValueError).",
      (("BlockPool.refcount", _REFCOUNT_RANGE, _REFCOUNT_RANGE.replace("0 <= b <", "b <")),), "a_bad_ids"),
    M("id_upper_off_by_one", "allocator",
      "Range check `0 <= b <= n_blocks`: id n_blocks passes it and crashes with IndexError. Verified: "
      "incref(4) on a 4-block pool raises IndexError (contract: ValueError).",
      (("BlockPool._in_use", _IN_USE_RANGE, _IN_USE_RANGE.replace("b < self.n_blocks:", "b <= self.n_blocks:")),), "a_bad_ids"),
    M("incref_accepts_free", "allocator",
      "incref checks the id range but not that the block is in use. Verified: incref of a free block "
      "succeeds, refcount 1 while the block is still on the free list (contract: ValueError).",
      (("BlockPool.incref", "        self._ref[self._in_use(b)] += 1\n",
        "        b = _as_int(b, \"block id\")\n        if not 0 <= b < self.n_blocks:\n"
        "            raise ValueError(f\"bad block id {b}\")\n        self._ref[b] += 1\n"),), "a_free_block_ops"),
    M("decref_accepts_free", "allocator",
      "decref does not detect a double free: the refcount goes to -1. Verified: alloc, decref, decref -> "
      "no ValueError, refcount -1 (contract: ValueError, pool unchanged).",
      (("BlockPool.decref", _DECREF_HEAD, "        b = _as_int(b, \"block id\")\n        self._ref[b] -= 1\n"),), "a_double_free"),
    M("refcount_free_raises", "allocator",
      "refcount of a free block raises ValueError (treating it like the other operations on a free block) "
      "instead of returning 0. Verified: refcount(0) of a fresh pool raises ValueError (contract: 0).",
      (("BlockPool.refcount", _REFCOUNT_RANGE, _REFCOUNT_RANGE.replace("        return self._ref[b]",
                                                 "        if self._ref[b] == 0:\n            raise ValueError(f\"block "
                                                 "{b} is free\")\n"
                                                 "        return self._ref[b]")),), "a_free_block_ops"),
    M("n_free_off_by_one", "allocator",
      "n_free is computed as n_blocks - n_used - 1 (one block kept back by mistake). Verified: a fresh 8-block "
      "pool reports n_free 7 (contract: 8).",
      (("BlockPool.n_free", "        return self.n_blocks - self._used\n", "        return self.n_blocks - self._used - 1\n"),), "a_fresh"),
    M("storage_tiny_shape", "allocator",
      "Storage shape hard-coded for TINY (2 layers, 4 heads, d_head 16). Verified: a pool for a 3-layer, "
      "3-head, d_head 8 Config has k.shape (2, n, B, 4, 16) (contract: (3, n, B, 3, 8)).",
      (("BlockPool.__init__", "shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)",
        "shape = (2, n_blocks, block_size, 4, 16)"),), "a_fresh"),

    M("alloc_stays_full", "allocator",
      "Once alloc has found the pool full it remembers it (a flag set with the MemoryError, never cleared), so a "
      "block given back cannot be allocated again. Verified: 1-block pool, alloc, alloc (MemoryError), decref, "
      "alloc -> MemoryError (contract: the freed block, 0).",
      (("BlockPool.alloc", _ALLOC_HEAD, "        if not self._free or getattr(self, \"_was_full\", False):\n"
                     "            self._was_full = True\n"
                     "            raise MemoryError(f\"all {self.n_blocks} blocks are in use\")\n"),), "a_exhaust"),

    # ------------------------------------------------------------- Part 2: paged KV and the paged step
    M("slots_swapped", "paged_step",
      "Slot arithmetic swapped: logical block pos % B, slot pos // B. Verified: block size 1 raises IndexError "
      "on the second token; other sizes write to wrong slots (contract: logits equal contiguous to 1e-10).",
      (("_slots", "return np.asarray(table, dtype=np.int64)[..., pos // block_size], pos % block_size",
        "return np.asarray(table, dtype=np.int64)[..., pos % block_size], pos // block_size"),), "p_equiv"),
    M("slots_ignore_table", "paged_step",
      "Writes and reads use pos // B as the PHYSICAL block, ignoring the block table (works only while tables "
      "are 0,1,2,...). Verified: on a fragmented pool (blocks 1, 3 held) logits differ from contiguous by 7.4.",
      (("_slots", "return np.asarray(table, dtype=np.int64)[..., pos // block_size], pos % block_size",
        "return np.broadcast_to(pos // block_size, np.shape(table)[:-1] + pos.shape), pos % block_size"),),
      "p_equiv"),
    M("embed_start_plus_one", "paged_step",
      "Positions off by one: the chunk is embedded at start + 1. Verified: prefill logits differ from the "
      "contiguous forward by O(1).",
      (("paged_step", "x = embed(params, cfg, np.stack([chunks[i] for i in idx]), start)",
        "x = embed(params, cfg, np.stack([chunks[i] for i in idx]), start + 1)"),), "p_equiv"),
    M("causal_start_zero", "paged_step",
      "attention_core is given start=0 whatever the position, so a decode token sees only key 0. Verified: "
      "prefill matches, the first decode differs from contiguous.",
      (("paged_step", "attention_core(q, K, V, start))", "attention_core(q, K, V, 0))"),), "p_equiv"),
    M("causal_start_last", "paged_step",
      "attention_core is given start + T - 1: every query of a prefill sees the whole chunk (no causal mask "
      "inside the chunk). Verified: every multi-token chunk's logits differ (single-token decodes still match).",
      (("paged_step", "attention_core(q, K, V, start))", "attention_core(q, K, V, start + T - 1))"),), "p_equiv"),
    M("blocks_floor_plus_one", "paged_step",
      "Blocks needed computed as (length + n) // B + 1 instead of ceil: one block too many whenever the new "
      "length is a multiple of B. Verified: a 4-token prefill with B=4 holds 2 blocks (contract: ceil(4/4)=1).",
      (("PagedSequence._new_blocks", "math.ceil((self.length + n) / self.pool.block_size)", "(self.length + n) // self.pool.block_size + 1"),),
      "p_boundaries"),
    M("blocks_floor", "paged_step",
      "Blocks needed computed as (length + n) // B (floor): a partly filled last block is never allocated. "
      "Verified: a 1-token prefill with B=4 gets 0 blocks and raises IndexError (contract: 1 block).",
      (("PagedSequence._new_blocks", "math.ceil((self.length + n) / self.pool.block_size)", "(self.length + n) // self.pool.block_size"),),
      "p_boundaries"),
    M("outputs_sorted_by_length", "paged_step",
      "The logits come back shortest-chunk-first (a 'batching' optimisation) instead of in list order. "
      "Verified: chunks of sizes 7, 2, 5 -> outputs of shapes (2,V),(5,V),(7,V) (contract: one per sequence, "
      "in list order).",
      (("paged_step", "    return out\n", "    return sorted(out, key=len)\n"),), "p_batch_order"),
    M("reserve_reverse_order", "paged_step",
      "Blocks are reserved for the batch in reverse list order, so tables differ from the lowest-first, "
      "list-order allocation. Verified: three new sequences prefilled with 7, 2, 5 tokens get tables "
      "[3,4], [2], [0,1] (contract: lowest free first, in list order: [0,1], [2], [3,4]).",
      (("paged_step", "        seq.reserve(len(chunk))\n", "        pass\n    for seq, chunk in reversed(list(zip(seqs, chunks))):\n"
                                              "        seq.reserve(len(chunk))\n"),), "p_batch_order"),
    M("no_step_precheck", "paged_step",
      "No up-front count: sequences reserve one by one, so a step that runs out part-way leaves earlier "
      "sequences grown. Verified: two sequences, enough blocks for the first only -> MemoryError with the "
      "first sequence's table already extended (contract: nothing changed).",
      (("paged_step", "        if n > pool.n_free:\n            raise MemoryError(f\"this step needs {n} blocks, "
        "the pool has {pool.n_free} free\")\n", "        pass\n"),), "p_atomic"),
    M("count_copies_n", "paged_step",
      "The step's count charges one copy per sequence writing into a partly filled last block (n, even when "
      "unshared) instead of min(n, refcount - 1). Verified: a step needing exactly the 3 free blocks, one "
      "sequence extending its own partial block, raises MemoryError (contract: a step that fits must not fail).",
      (("_blocks_needed", "need[pid] += min(n, pools[pid].refcount(b) - 1)", "need[pid] += n"),), "p_exact_count"),
    M("count_ignores_copies", "paged_step",
      "The step's count forgets copy-on-write copies, so a step that cannot copy passes the check and fails "
      "mid-way. Verified: 3 sharers, 1 free block -> MemoryError raised after the first sequence copied "
      "(n_copies 1, table changed; contract: nothing changed).",
      (("_blocks_needed", "need[pid] += min(n, pools[pid].refcount(b) - 1)", "need[pid] += 0"),), "p_atomic"),
    M("token_eq_vocab_accepted", "paged_step",
      "Token check uses > vocab: token == vocab passes validation and crashes later with IndexError after the "
      "pool changed. Verified: chunk [vocab] -> IndexError, not ValueError.",
      (("_check_chunk", "arr.max() >= cfg.vocab", "arr.max() > cfg.vocab"),), "p_validation"),
    M("negative_token_wraps", "paged_step",
      "Negative token ids are not rejected and wrap around in the embedding table. Verified: chunk [-1] "
      "returns logits (contract: ValueError).",
      (("_check_chunk", "if arr.min() < 0 or arr.max() >= cfg.vocab:", "if arr.max() >= cfg.vocab:"),), "p_validation"),
    M("max_len_exact_rejected", "paged_step",
      "max_len check off by one (>=): a step that reaches max_len exactly is refused. Verified: max_len 24, "
      "length 20 + 4 tokens -> ValueError (contract: fine).",
      (("_check_chunk", "seq.length + arr.size > cfg.max_len", "seq.length + arr.size >= cfg.max_len"),), "p_validation"),
    M("max_len_unchecked", "paged_step",
      "No max_len check in paged_step (relies on embed's): an overlong second sequence fails only after the "
      "first was advanced. Verified: [ok, overlong] -> ValueError but the first sequence's length changed.",
      (("_check_chunk", "    if seq.length + arr.size > cfg.max_len:\n        raise ValueError(f\"{seq.length} + {arr.size} "
        "tokens would pass max_len={cfg.max_len}\")\n", ""),), "p_validation"),
    M("empty_chunk_accepted", "paged_step",
      "Empty chunks pass validation (token check skipped when empty), so reserve(0) fails after earlier "
      "sequences reserved. Verified: chunks [[1,2,3], empty int64 array] -> ValueError with the first "
      "sequence's table grown (an empty Python list is still refused by the dtype check).",
      (("_check_chunk", "if arr.ndim != 1 or arr.size == 0:", "if arr.ndim != 1:"),
       ("_check_chunk", "if arr.min() < 0 or arr.max() >= cfg.vocab:", "if arr.size and (arr.min() < 0 or arr.max() >= cfg.vocab):")),
      "p_validation"),
    M("len_mismatch_unchecked", "paged_step",
      "len(seqs) != len(chunks) is not checked; zip silently drops the extra sequence. Verified: 2 sequences, "
      "1 chunk -> returns 1 output and advances the first (contract: ValueError, nothing changed).",
      (("paged_step", "    if len(seqs) != len(chunks):\n        raise ValueError(f\"{len(seqs)} sequences but {len(chunks)} "
        "chunks\")\n", ""),), "p_validation"),
    M("memory_before_value", "paged_step",
      "Validation runs after the capacity check, so bad input on a full pool gives MemoryError. Verified: "
      "full pool + a chunk that would pass max_len -> MemoryError (contract: ValueError before any MemoryError).",
      (("paged_step", "    chunks = [_check_chunk(cfg, s, c) for s, c in zip(seqs, chunks)]\n", ""),
       ("paged_step", "    for seq, chunk in zip(seqs, chunks):\n        seq.reserve(len(chunk))\n",
        "    chunks = [_check_chunk(cfg, s, c) for s, c in zip(seqs, chunks)]\n"
        "    for seq, chunk in zip(seqs, chunks):\n        seq.reserve(len(chunk))\n")), "p_validation"),
    M("length_assigned_not_added", "paged_step",
      "After the step, length is set to the chunk's size instead of start + size (= where += was meant). "
      "Verified: after a prefill of 7 and one decode, length is 1, so the next decode attends at position 1 and"
      " the table no longer has ceil(length / B) blocks.",
      (("paged_step", "            seqs[i].length = start + T\n", "            seqs[i].length = T\n"),), "p_equiv"),
    M("slots_block_size_16", "paged_step",
      "Slot arithmetic hard-codes block size 16. Verified: block size 1 -> IndexError, 3/4 -> logits different "
      "from contiguous (block size 16 still works).",
      (("_slots", "return np.asarray(table, dtype=np.int64)[..., pos // block_size], pos % block_size", "return np.asarray(table, dtype=np.int64)[..., pos // 16], pos % 16"),), "p_equiv"),
    M("layers_hard_coded_2", "paged_step",
      "The layer loop hard-codes TINY's 2 layers. Verified: a 3-layer Config gives logits different from "
      "the contiguous forward (a 1-layer Config crashes).",
      (("paged_step", "        for layer in range(cfg.n_layers):\n", "        for layer in range(2):\n"),), "p_equiv"),
    M("storage_float32", "allocator",
      "K/V storage in float32. Verified: paged logits differ from the float64 contiguous forward by ~1e-6 "
      "(contract: float64, equal to 1e-10).",
      (("BlockPool.__init__", "self.k = np.zeros(shape)", "self.k = np.zeros(shape, dtype=np.float32)"),
       ("BlockPool.__init__", "self.v = np.zeros(shape)", "self.v = np.zeros(shape, dtype=np.float32)")), "a_fresh"),
    M("read_old_length", "paged_step",
      "read gathers self.length positions, ignoring its length argument, so the chunk just written (beyond "
      "self.length, within the capacity) is missing. Verified: after reserve(7) and write, read(1, 9) "
      "returns 0 rows instead of 9.",
      (("PagedSequence.read", "        b, s = _slots(self.blocks, self.pool.block_size, 0, length)\n",
        "        b, s = _slots(self.blocks, self.pool.block_size, 0, self.length)\n"),), "p_write_read"),
    M("positions_restart_at_zero", "paged_step",
      "Every step starts its chunk at position 0 (as if each step were a new prompt): K/V are written over "
      "positions 0..T-1, attention sees only the chunk, and length becomes T. Verified: the first decode after "
      "a prefill gives logits different from the contiguous forward.",
      (("paged_step", "        pool = seqs[idx[0]].pool\n", "        pool = seqs[idx[0]].pool\n        start = 0\n"),), "p_equiv"),
    M("count_sharers_not_capped", "paged_step",
      "The step's count charges one copy per sequence writing into a shared, partly filled last block (n for n "
      "holders) instead of min(n, refcount - 1): the last holder writes in place and needs none. Verified: 3 "
      "holders of one block each write a token with exactly 2 + 0 blocks free: MemoryError (contract: it fits).",
      (("_blocks_needed", "need[pid] += min(n, pools[pid].refcount(b) - 1)", "need[pid] += n if pools[pid].refcount(b) > 1 else 0"),),
      "p_exact_count"),
    M("reserve_partial", "paged_step",
      "reserve allocates block by block without checking first, so a failed reserve keeps the blocks it got. "
      "Verified: 1 free block, reserve(9) with B=4 -> MemoryError with one block added to the table "
      "(contract: all or nothing).",
      (("PagedSequence.reserve", "        if need > self.pool.n_free:\n            raise MemoryError(f\"need {need} blocks, "
        "{self.pool.n_free} free\")\n", ""),), "p_reserve"),
    M("reserve_zero_accepted", "paged_step",
      "reserve accepts n = 0 (checks n < 0). Verified: reserve(0) returns without ValueError.",
      (("PagedSequence.reserve", "        if n < 1:\n            raise ValueError(f\"reserve needs n >= 1, got {n}\")",
        "        if n < 0:\n            raise ValueError(f\"reserve needs n >= 1, got {n}\")"),), "p_reserve"),

    # ------------------------------------------------------------------- Part 3: blockwise attention
    M("bw_softmax_per_block", "blockwise_attention",
      "Softmax normalised inside each block, then the per-block outputs summed (not eq. 4's one softmax). "
      "Verified: length 9, B=4 -> differs from attention_core by O(1) (single-block lengths still match).",
      (("blockwise_attention", "    weights = [np.exp(s - top) for s in scores]\n    total = np.sum([w.sum(axis=-1) for w in weights], "
        "axis=0)[:, None]\n",
        "    weights = [np.exp(s - s.max(axis=-1, keepdims=True)) for s in scores]\n"
        "    weights = [w / w.sum(axis=-1, keepdims=True) for w in weights]\n    total = 1.0\n"),), "b_equiv"),
    M("bw_stale_slots", "blockwise_attention",
      "The last block is read whole (B slots), including unfilled slots holding stale data. Verified: "
      "length 5, B=4, random storage -> differs from attention_core.",
      (("blockwise_attention", "m = seq.blocks[i], min(B, L - i * B)", "m = seq.blocks[i], B"),), "b_equiv"),
    M("bw_scale_d_model", "blockwise_attention",
      "Scores scaled by 1/sqrt(d_model) instead of 1/sqrt(d_head). Verified: differs from attention_core.",
      (("blockwise_attention", _BW_SCORES, _BW_SCORES.replace("np.sqrt(q.shape[-1])", "np.sqrt(seq.pool.cfg.d_model)")),), "b_equiv"),
    M("bw_no_scale", "blockwise_attention",
      "Scores not scaled at all. Verified: differs from attention_core.",
      (("blockwise_attention", _BW_SCORES, _BW_SCORES.replace(" / np.sqrt(q.shape[-1])", "")),), "b_equiv"),
    M("bw_values_layer0", "blockwise_attention",
      "V always read from layer 0 (wrong layer). Verified: layer 1 differs from attention_core.",
      (("blockwise_attention", "values.append(seq.pool.v[layer, b, :m])", "values.append(seq.pool.v[0, b, :m])"),), "b_equiv"),
    M("bw_sorted_blocks", "blockwise_attention",
      "Blocks visited in sorted physical order instead of table order. Verified: table [5, 1, 3] -> differs "
      "from attention_core.",
      (("blockwise_attention", "b, m = seq.blocks[i], min(B, L - i * B)", "b, m = sorted(seq.blocks)[i], min(B, L - i * B)"),), "b_equiv"),
    M("bw_drops_last_position", "blockwise_attention",
      "The current position is left out (each block counted with length - 1). Verified: length 1 raises "
      "ValueError (empty softmax), longer lengths differ from attention_core.",
      (("blockwise_attention", "min(B, L - i * B)", "min(B, L - 1 - i * B)"),), "b_equiv"),
    M("bw_extra_block", "blockwise_attention",
      "Number of blocks computed as L // B + 1 instead of ceil(L / B): one block too many when L is a multiple "
      "of B. Verified: length 1 with B=1 (any length that is a multiple of B) -> IndexError.",
      (("blockwise_attention", "for i in range(-(-L // B)):", "for i in range(L // B + 1):"),), "b_equiv"),
    M("bw_block_size_16", "blockwise_attention",
      "Block size hard-coded to 16. Verified: B=4 differs from attention_core (B=16 matches).",
      (("blockwise_attention", "L, B = seq.length, seq.pool.block_size", "L, B = seq.length, 16"),), "b_equiv"),
    M("bw_scale_tiny", "blockwise_attention",
      "Scale hard-coded to TINY's d_head 16. Verified: a d_head 8 Config differs from attention_core.",
      (("blockwise_attention", _BW_SCORES, _BW_SCORES.replace("np.sqrt(q.shape[-1])", "np.sqrt(16)")),), "b_equiv"),
    M("bw_max_over_heads", "blockwise_attention",
      "The softmax subtracts one maximum over all heads (and blocks) instead of each head's own: fine for small "
      "scores, but a head whose scores lie far below another's underflows to 0 / 0. Verified: queries scaled by "
      "60 give NaN (contract: equal to attention_core).",
      (("blockwise_attention", "    top = np.max([s.max(axis=-1) for s in scores], axis=0)[:, None]",
        "    top = np.max([s.max() for s in scores])"),), "b_equiv"),
    M("bw_gathers_all_blocks", "blockwise_attention",
      "Gathers the whole K and V with one fancy index (seq.pool.k[layer, seq.blocks[:n]]) and calls "
      "attention_core: right numbers, but the contract forbids building the whole [length, H, Dh] K or V. "
      "Verified: the tests' storage, which serves one block per index, refuses it (NotOneBlock).",
      (("blockwise_attention", "    scores, values = [], []\n",
        "    n = -(-L // B)\n"
        "    K = seq.pool.k[layer, seq.blocks[:n]].reshape(-1, *q.shape)[:L]\n"
        "    V = seq.pool.v[layer, seq.blocks[:n]].reshape(-1, *q.shape)[:L]\n"
        "    return attention_core(q[None, None], K, V, L - 1)[0, 0]\n"
        "    scores, values = [], []\n"),), "b_equiv"),
    M("bw_uses_read", "blockwise_attention",
      "Gathers K/V with seq.read and calls attention_core (forbidden: the contract lets the tests pass an "
      "object with only the listed attributes). Verified: a plain attribute object raises AttributeError.",
      (("blockwise_attention", "    scores, values = [], []\n",
        "    K, V = seq.read(layer, L)\n    return attention_core(q[None, None], K, V, L - 1)[0, 0]\n"
        "    scores, values = [], []\n"),), "b_equiv"),
    M("bw_no_max", "blockwise_attention",
      "The softmax takes exp of the raw scores, no maximum subtracted: equal in exact arithmetic, but a score "
      "above 709 overflows to inf (inf / inf = NaN). Verified: scores of ~10000 give NaN (contract: equal to "
      "attention_core); small scores match.",
      (("blockwise_attention", "    weights = [np.exp(s - top) for s in scores]\n", "    weights = [np.exp(s) for s in scores]\n"),), "b_equiv"),
    M("bw_length_one_rejected", "blockwise_attention",
      "The length check is off by one (L <= 1): a sequence of one position raises ValueError. Verified: "
      "length 1 raises ValueError (contract: its output is that position's V).",
      (("blockwise_attention", "    if L < 1:\n        raise ValueError(\"blockwise_attention needs",
        "    if L <= 1:\n        raise ValueError(\"blockwise_attention needs"),), "b_equiv"),
    M("bw_empty_gives_zeros", "blockwise_attention",
      "A sequence of length 0 attends to nothing and returns zeros instead of raising. Verified: length 0 "
      "returns a [H, Dh] array of zeros (contract: ValueError).",
      (("blockwise_attention", "    if L < 1:\n        raise ValueError(\"blockwise_attention needs",
        "    if L < 1:\n        return np.zeros_like(q)\n        raise ValueError(\"blockwise_attention needs"),), "b_empty"),

    # ------------------------------------------------------------ Part 4: sharing and copy-on-write
    M("fork_no_incref", "copy_on_write",
      "fork shares the table but does not incref. Verified: after fork the shared blocks have refcount 1 "
      "(contract: 2).",
      (("PagedSequence.fork", "        for b in self.blocks:\n            self.pool.incref(b)\n", ""),), "c_fork"),
    M("fork_aliases_table", "copy_on_write",
      "fork gives the child the parent's list object (not a copy), so a child's copy-on-write or new block "
      "changes the parent's table. Verified: 3 sharers of a partial block decode -> n_copies 1 (contract: 2) "
      "and the tables are corrupted.",
      (("PagedSequence.fork", "child.blocks, child.length = list(self.blocks), self.length", "child.blocks, child.length = self.blocks, self.length"),),
      "c_cow_step"),
    M("fork_length_zero", "copy_on_write",
      "fork copies the table but not the length (child.length stays 0). Verified: child.length 0 after fork "
      "of a 6-token sequence (contract: 6).",
      (("PagedSequence.fork", "child.blocks, child.length = list(self.blocks), self.length", "child.blocks = list(self.blocks)"),), "c_fork"),
    M("fork_eager_copy", "copy_on_write",
      "fork copies every block (copy_block) instead of sharing. Verified: n_used grows by 2 and n_copies is "
      "2 after one fork of a 2-block sequence (contract: shared, refcount 2, no copy).",
      (("PagedSequence.fork", "        for b in self.blocks:\n            self.pool.incref(b)\n        child.blocks, child.length = "
        "list(self.blocks), self.length\n",
        "        child.blocks, child.length = [self.pool.copy_block(b) for b in self.blocks], self.length\n"),),
      "c_fork"),
    M("cow_on_full_block", "copy_on_write",
      "Copy-on-write also copies a FULL shared last block. Verified: 8-token prompt, B=4, 3 sharers decode -> "
      "n_copies 2 (contract: 0; new tokens go to new blocks).",
      (("PagedSequence._needs_copy", "return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1",
        "return bool(self.blocks) and self.pool.refcount(self.blocks[-1]) > 1"),), "c_full_block"),
    M("cow_always_n_copies", "copy_on_write",
      "A sequence remembers it was forked and copies its partial last block on its first write, even when it "
      "is the last holder (refcount 1). Verified: 3 sharers decode -> n_copies 3 (contract: n - 1 = 2).",
      (("PagedSequence._needs_copy", "return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1",
        "return self.length % self.pool.block_size != 0 and getattr(self, '_forked', False)"),
       ("PagedSequence.reserve", "            self.pool.decref(shared)\n", "            self.pool.decref(shared)\n            self._forked = False\n"),
       ("PagedSequence.fork", "        child.blocks, child.length = list(self.blocks), self.length\n",
        "        child.blocks, child.length = list(self.blocks), self.length\n        child._forked = self._forked = True\n")),
      "c_cow_step"),
    M("cow_never", "copy_on_write",
      "No copy-on-write: sharers write into the shared partial block. Verified: after 3 sharers decode, "
      "n_copies 0 and two of them get logits different from the contiguous forward.",
      (("PagedSequence._needs_copy", "return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1",
        "return False"),), "c_cow_step"),
    M("cow_decref_new", "copy_on_write",
      "After copying, decref the NEW block instead of the shared one: it is back on the free list while in "
      "the table, and the shared block keeps its count. Verified: 3 sharers decode -> n_copies 3 (contract: 2).",
      (("PagedSequence.reserve", "            self.pool.decref(shared)\n", "            self.pool.decref(self.blocks[-1])\n"),), "c_cow_step"),
    M("cow_leaks_shared", "copy_on_write",
      "After copying, the shared block is never decref'd (a leak). Verified: refcounts stay too high and "
      "n_copies is 3 for 3 sharers (the last still sees refcount > 1).",
      (("PagedSequence.reserve", "            self.pool.decref(shared)\n", ""),), "c_cow_step"),
    M("free_no_reset", "copy_on_write",
      "free decrefs the blocks but leaves blocks/length as they were. Verified: after free, blocks still "
      "listed and length unchanged (contract: [] and 0); freeing again raises ValueError.",
      (("PagedSequence.free", "        self.blocks, self.length = [], 0\n", ""),), "c_free"),
    M("free_drops_all_refs", "copy_on_write",
      "free releases each block completely (decref until 0), also blocks other sequences still share. "
      "Verified: freeing a fork frees the parent's blocks too (refcounts 0 while in the parent's table).",
      (("PagedSequence.free", "        for b in self.blocks:\n            self.pool.decref(b)\n        self.blocks",
        "        for b in self.blocks:\n            while self.pool.refcount(b) > 0:\n                "
        "self.pool.decref(b)\n"
        "        self.blocks"),), "c_free"),
    M("free_keeps_length", "copy_on_write",
      "free gives every block back and empties the table but leaves length as it was. Verified: after free of "
      "a 6-token sequence, length is 6 (contract: 0), and its next step starts at position 6 with no blocks.",
      (("PagedSequence.free", "        self.blocks, self.length = [], 0\n", "        self.blocks = []\n"),), "c_free"),
    M("fork_empty_raises", "copy_on_write",
      "fork refuses a sequence that holds no blocks yet (it assumes a prefill came first). Verified: "
      "PagedSequence(pool).fork() raises ValueError (contract: an empty child sharing nothing, length 0).",
      (("PagedSequence.fork", "    def fork(self):\n        child = PagedSequence(self.pool)\n",
        "    def fork(self):\n        if not self.blocks:\n            raise ValueError(\"nothing to share\")\n"
        "        child = PagedSequence(self.pool)\n"),), "c_fork"),
    M("free_empty_raises", "copy_on_write",
      "free of a sequence that holds no blocks raises (taken for a double free). Verified: free() on a new "
      "sequence, and a second free(), raise ValueError (contract: free() on an empty sequence does nothing).",
      (("PagedSequence.free", "    def free(self):\n        for b in self.blocks:",
        "    def free(self):\n        if not self.blocks:\n            raise ValueError(\"nothing to free\")\n"
        "        for b in self.blocks:"),), "c_free"),
    M("cow_copies_first_block", "copy_on_write",
      "Copy-on-write copies the table's FIRST block instead of the shared last one (and decrefs the last): the "
      "new last block holds the wrong K/V. Verified: after a fork of a 6-token sequence (B=4) reserve(1) on the "
      "child gives a last block whose 2 filled slots hold positions 0-1's K/V, not 4-5's.",
      (("PagedSequence.reserve", "            self.blocks[-1] = self.pool.copy_block(shared)\n",
        "            self.blocks[-1] = self.pool.copy_block(self.blocks[0])\n"),), "c_reserve_cow"),
    M("cow_checks_first_block", "copy_on_write",
      "Copy-on-write decides from the refcount of the table's FIRST block instead of the last: a sequence whose "
      "prompt blocks are shared but whose last block is private copies it anyway, and one whose last block is "
      "shared but first is not writes into the shared block. Verified: fork, then both holders write: the "
      "child's copy is made, then the parent copies its private block too (contract: n - 1 copies).",
      (("PagedSequence._needs_copy", "return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1",
        "return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[0]) > 1"),), "c_cow_step"),
]


# Part 5 (bonus): the reference's PrefixCache and cached_prefill.
_CAP = "self._keys(tokens)[:(len(tokens) - 1) // self.pool.block_size]"
_PRECHECK = ("    if short > len(cache._evictable(keep=hits)):\n"
             "        raise MemoryError(f\"the prompt needs {short} blocks more than are free or evictable\")\n")
_INCREF_HITS = ("    for b in hits:\n        pool.incref(b)\n"
                "    seq.blocks, seq.length = list(hits), len(hits) * pool.block_size\n")
_EVICT_LOOP = ("        for b in victims:\n            del self._block[self._lru.pop(b)]\n            self.pool.decref(b)\n")
MUTANTS += [
    M("key_block_content", "prefix_cache",
      "A block's key is its own B tokens, not the whole prefix it ends, so the same block content after another "
      "prefix matches. Verified: seq A = P Q R inserted, then X Q R inserted caches only X's block, and lookup(X Q R "
      "t) returns [X's block, A's block 1, A's block 2] (contract: X Q R's own three blocks).",
      (("PrefixCache._keys", "return [t[:(i + 1) * self.pool.block_size] for i in range(len(t) // self.pool.block_size)]",
        "return [t[i * self.pool.block_size:(i + 1) * self.pool.block_size] for i in range(len(t) // self.pool.block_size)]"),),
      "pc_keys"),
    M("lookup_no_cap", "prefix_cache",
      "lookup returns every cached full block, without the (len - 1) // B cap, so a prompt cached whole leaves "
      "no token to compute. Verified: 8 tokens cached in 2 blocks of 4, lookup of the same 8 returns [0, 1] "
      "(contract: [0]), and cached_prefill of them raises ValueError (an empty chunk) after taking the hits "
      "(refcounts 3, 3 instead of 2, 2).",
      (("PrefixCache.lookup", _CAP, "self._keys(tokens)[:len(tokens) // self.pool.block_size]"),), "pc_hits"),
    M("lookup_cap_one_block_short", "prefix_cache",
      "lookup keeps back the prompt's last FULL block (cap len // B - 1) instead of leaving one token: a prompt "
      "that ends inside a block recomputes a block it could reuse. Verified: 13 tokens cached in blocks of 4, "
      "lookup of the first 5 returns [] (contract: [0]), of all 13 two blocks (contract: 3).",
      (("PrefixCache.lookup", _CAP, "self._keys(tokens)[:max(0, len(tokens) // self.pool.block_size - 1)]"),), "pc_hits"),
    M("hit_tokens_counts_blocks", "prefix_cache",
      "n_hit_tokens adds the number of hit BLOCKS, not tokens. Verified: a request hitting 2 blocks of 4 adds 2 "
      "(contract: 8).",
      (("cached_prefill", "    cache.n_hit_tokens += len(hits) * pool.block_size\n", "    cache.n_hit_tokens += len(hits)\n"),), "pc_hits"),
    M("recompute_last_hit_token", "prefix_cache",
      "cached_prefill starts one token early (length = hits * B - 1) to 'recompute the last cached token': the "
      "step writes into a full shared block and returns one row too many. Verified: 2 hits of 4 on a 13-token "
      "prompt return 6 rows (contract: 5).",
      (("cached_prefill", "    seq.blocks, seq.length = list(hits), len(hits) * pool.block_size\n",
        "    seq.blocks, seq.length = list(hits), max(0, len(hits) * pool.block_size - 1)\n"),), "pc_hits"),
    M("insert_caches_partial_block", "prefix_cache",
      "The partly filled last block is cached too (keys for ceil(len / B) blocks). Verified: insert of 13 "
      "tokens with blocks of 4 returns 4 (contract: its 3 full blocks) and takes a reference on the partial "
      "block.",
      (("PrefixCache._keys", "return [t[:(i + 1) * self.pool.block_size] for i in range(len(t) // self.pool.block_size)]",
        "return [t[:(i + 1) * self.pool.block_size] for i in range(-(-len(t) // self.pool.block_size))]"),), "pc_keys"),
    M("insert_reuses_cached_block", "prefix_cache",
      "insert caches a block under a new key even when that physical block already caches another key: one block "
      "under two keys, two cache references on it. Verified: insert(Y Z, [A's block 0, own block]) returns 2 "
      "(contract: 1) and A's block 0 gets refcount 3 with one holder.",
      (("PrefixCache.insert", "if key not in self._block and b not in self._lru]", "if key not in self._block]"),), "pc_keys"),
    M("insert_counts_all_blocks", "prefix_cache",
      "insert returns the number of full blocks of the tokens, not how many it newly cached. Verified: inserting "
      "the same 13 tokens (blocks of 4) twice returns 3 both times (contract: 3, then 0).",
      (("PrefixCache.insert", "        return len(new)\n", "        return len(keys)\n"),), "pc_keys"),
    M("no_cache_reference", "prefix_cache",
      "insert does not incref: the cache holds no reference of its own, so a cached block is free once its "
      "sequence is, and evict decrefs a reference a sequence holds. Verified: after insert, refcount(b) is 1 "
      "(contract: 2); after the sequence is freed its cached blocks are free.",
      (("PrefixCache.insert", "            self.pool.incref(b)\n            self._block[key], self._lru[b] = b, key\n",
        "            self._block[key], self._lru[b] = b, key\n"),), "pc_keys"),
    M("hits_not_in_table", "prefix_cache",
      "cached_prefill takes the hits' references and sets the length but leaves the table empty, so paged_step "
      "allocates fresh blocks for the cached positions and reads stale K/V there. Verified: the logits of a "
      "request with 2 hits differ from the uncached prefill by O(1).",
      (("cached_prefill", "    seq.blocks, seq.length = list(hits), len(hits) * pool.block_size\n",
        "    seq.length = len(hits) * pool.block_size\n"),), "pc_logits"),
    M("lookup_touches_recency", "prefix_cache",
      "lookup marks its hits most recently used (a 'read' counts as a use), so recency changes outside insert. "
      "Verified: A (13 tokens) then B (A's first 8 and 5 more) prefilled and freed, then lookup(A): evict(1) "
      "releases B's block 2 (contract: A's tail, block 2; lookup changes nothing).",
      (("PrefixCache.lookup", "            hits.append(self._block[key])\n",
        "            hits.append(self._block[key])\n            self._lru.move_to_end(self._block[key])\n"),), "pc_eviction"),
    M("recency_head_oldest", "prefix_cache",
      "insert marks a use from block 0 to the deepest block, so the HEAD of a chain is the oldest and is evicted "
      "first, orphaning the rest. Verified: after one request of 3 cached blocks, evict(1) releases block 0 "
      "(contract: the tail, block 2).",
      (("PrefixCache.insert", "        for key in reversed(keys):", "        for key in keys:"),), "pc_eviction"),
    M("recency_stops_at_skipped_key", "prefix_cache",
      "insert's use walks the chain from the deepest block down and stops at the first key left uncached (as "
      "lookup stops at a miss), so when a key was skipped the blocks before it are not counted as used. "
      "Verified: P Q R cached (blocks 0 1 2), X Y cached (3 4), then insert(P W Z, [0, 4, 7]) skips P W (block 4 "
      "caches X Y) and caches P W Z in 7: evict(1) until nothing goes, after every sequence is freed, releases "
      "2 1 0 4 3 7 (contract: 2 1 4 3 7 0: P W Z's use counts P's block 0 as used, newest).",
      (("PrefixCache.insert", "            if key in self._block:\n                self._lru.move_to_end(self._block[key])\n",
        "            if key not in self._block:\n                break\n"
        "            self._lru.move_to_end(self._block[key])\n"),), "pc_eviction"),
    M("evict_most_recent_first", "prefix_cache",
      "evict takes the most recently used blocks first (the order list read from the wrong end). Verified: A "
      "then B (A's first 8 tokens and 5 more) prefilled and freed: evict(1) releases block 0, the head both "
      "used last (contract: the least recently used, A's tail, block 2).",
      (("PrefixCache.evict", "        victims = self._evictable()[:n]\n", "        victims = self._evictable()[::-1][:n]\n"),), "pc_eviction"),
    M("evict_cascades", "prefix_cache",
      "Evicting a block also forgets every cached key that extends its key (a radix-tree delete of the subtree), "
      "dropping the cache's reference on them. Verified: P Q R3 W cached with its tail blocks held by a sequence, "
      "evicting P's and PQ's blocks also uncaches the held 2.2 and 2.3 (contract: no cascade, they stay cached).",
      (("PrefixCache.evict", _EVICT_LOOP, "        for b in victims:\n            key = self._lru.pop(b)\n            del self._block[key]\n"
                     "            self.pool.decref(b)\n"
                     "            for k2 in [k for k in self._block if k[:len(key)] == key]:\n"
                     "                b2 = self._block.pop(k2)\n                del self._lru[b2]\n"
                     "                self.pool.decref(b2)\n"),), "pc_eviction"),
    M("evict_returns_n", "prefix_cache",
      "evict returns n, the number asked for, instead of the number released. Verified: evict(5) with 2 evictable "
      "blocks returns 5 (contract: 2).",
      (("PrefixCache.evict", "        return len(victims)\n", "        return n\n"),), "pc_eviction"),
    M("evict_held_blocks", "prefix_cache",
      "A block is evictable whatever its refcount: the cache drops its reference on blocks sequences still hold "
      "(they stay in use, but are forgotten). Verified: a live request's cached blocks are evicted first by "
      "evict(1) (contract: only blocks with refcount 1).",
      (("PrefixCache._evictable", "return [b for b in self._lru if self.pool.refcount(b) == 1 and b not in keep]",
        "return [b for b in self._lru if b not in keep]"),), "pc_eviction"),
    M("prefill_no_precheck", "prefix_cache",
      "cached_prefill does not check first that free plus evictable blocks suffice: it takes the hits, evicts "
      "what it can, and paged_step raises MemoryError. Verified: a prompt one block short of fitting raises "
      "MemoryError with its hits' refcounts raised and cached blocks evicted (contract: nothing changed).",
      (("cached_prefill", _PRECHECK, ""),), "pc_exhaustion"),
    M("evict_before_taking_hits", "prefix_cache",
      "cached_prefill evicts the shortfall before taking its hits' references, so a hit with refcount 1 can be "
      "evicted and then reused. Verified: the hit block (only the cache holds it, the oldest) is evicted, "
      "incref then fails on a free block: ValueError (contract: the hit is never evicted, the prefill fits).",
      (("cached_prefill", _INCREF_HITS + "    cache.evict(max(0, short))\n", "    cache.evict(max(0, short))\n" + _INCREF_HITS),),
      "pc_exhaustion"),
    M("shortfall_ignores_hits", "prefix_cache",
      "The shortfall counts every block of the prompt, the hits too, so cached_prefill evicts more than it needs "
      "(and refuses prompts that fit). Verified: a prompt with one hit, one block short, evicts 2 blocks "
      "(contract: 1).",
      (("cached_prefill", "short = math.ceil(len(prompt) / pool.block_size) - len(hits) - pool.n_free",
        "short = math.ceil(len(prompt) / pool.block_size) - pool.n_free"),), "pc_exhaustion"),
    M("insert_no_free_check", "prefix_cache",
      "insert does not check the blocks before caching: a free id among them makes pool.incref raise half-way, "
      "after earlier blocks were cached. Verified: insert(3 full blocks, [b0, a free block, b2]) raises "
      "ValueError with b0 cached (contract: nothing changed).",
      (("PrefixCache.insert", "        for _, b in new:\n            if self.pool.refcount(b) == 0:\n"
        "                raise ValueError(f\"block {b} is free: nothing to cache\")\n", ""),), "pc_errors"),
    M("prefill_checks_length_only", "prefix_cache",
      "cached_prefill checks only seq.length == 0, so a sequence with a block but length 0 is accepted and its "
      "block is dropped from its table. Verified: such a sequence is prefilled (contract: ValueError, nothing "
      "changed).",
      (("cached_prefill", "    if seq.length != 0 or len(seq.blocks) != 0:\n", "    if seq.length != 0:\n"),), "pc_errors"),
    M("prefill_any_pool", "prefix_cache",
      "cached_prefill does not check that seq.pool is cache.pool: a sequence on another pool takes the cache's "
      "block ids as its own. Verified: such a prefill succeeds (contract: ValueError, nothing changed).",
      (("cached_prefill", "    if seq.pool is not cache.pool:\n        raise ValueError(\"the sequence and the cache use different pools\")\n",
        ""),), "pc_errors"),
]


# Part 6 (bonus): the reference's SwapSpace.
_OUT, _IN = "SwapSpace.swap_out", "SwapSpace.swap_in"
_DISTINCT = "        distinct = list(dict.fromkeys(b for s in seqs for b in s.blocks))\n"
_CPU_OF = "        cpu = {b: self._cpu_free.pop(0) for b in distinct}\n"
_OUT_CHECK = ("        if len(distinct) > self.n_free:\n            raise MemoryError(f\"the group holds {len(distinct)} "
              "blocks, {self.n_free} CPU blocks are free\")\n")
_COPY_OUT = "            self.k[:, c], self.v[:, c] = self.pool.k[:, b], self.pool.v[:, b]\n"
_COPY_IN = "            self.pool.k[:, b], self.pool.v[:, b] = self.k[:, c], self.v[:, c]\n"
_ORDER = "        order = list(dict.fromkeys(c for _, table in group for c in table))\n"
MUTANTS += [
    M("swap_out_as_it_goes", "swap",
      "swap_out takes a CPU block per distinct block as it goes, raising MemoryError when none is left, instead "
      "of counting first. Verified: a group of 2 distinct blocks with 1 CPU block free raises MemoryError with "
      "n_free 0 (contract: nothing changed, n_free 1).",
      ((_OUT, _OUT_CHECK, ""),
       (_OUT, _CPU_OF, "        cpu = {}\n        for b in distinct:\n            if not self._cpu_free:\n"
                       "                raise MemoryError(\"no CPU block left\")\n"
                       "            cpu[b] = self._cpu_free.pop(0)\n")), "sw_atomic"),
    M("swap_out_per_entry", "swap",
      "swap_out copies every table ENTRY to a CPU block of its own: a block 3 forks share is copied 3 times, and "
      "swap_in gives each fork a private copy. Verified: 3 forks of a 2-block sequence: n_out 6 (contract: 2), "
      "and after swap_in every refcount is 1 (contract: 3 for each shared block).",
      ((_OUT, _DISTINCT, "        distinct = [b for s in seqs for b in s.blocks]    # one CPU block per entry\n"),
       (_OUT, _CPU_OF + "        for b, c in cpu.items():\n",
        "        cpu = [(b, self._cpu_free.pop(0)) for b in distinct]\n        for b, c in cpu:\n"),
       (_OUT, "        self._out[handle] = [(s.length, [cpu[b] for b in s.blocks]) for s in seqs]\n",
        "        entries = iter(c for _, c in cpu)\n"
        "        self._out[handle] = [(s.length, [next(entries) for _ in s.blocks]) for s in seqs]\n")), "sw_out"),
    M("swap_in_reverse_order", "swap",
      "swap_in takes its pool blocks for the group's CPU blocks in reverse order of first appearance. Verified: "
      "a group of 3 distinct blocks swapped in on an empty pool gets its first block 2 (contract: 0, the first "
      "alloc for the first block).",
      ((_IN, _ORDER, _ORDER.replace("table))\n", "table))[::-1]\n")),), "sw_in"),
    M("swap_n_out_counts_entries", "swap",
      "n_out adds the table entries of the group, not the distinct blocks copied. Verified: 3 forks of a 2-block "
      "sequence swapped out: n_out 6 (contract: 2).",
      ((_OUT, "        self.n_out += len(cpu)\n", "        self.n_out += sum(len(s.blocks) for s in seqs)\n"),), "sw_out"),
    M("swap_handle_reused", "swap",
      "swap_in never forgets a handle: the same handle swaps the group in again, from CPU blocks already free. "
      "Verified: swap_in(h) twice returns two groups (contract: ValueError the second time).",
      ((_IN, "        del self._out[handle]\n", ""),), "sw_errors"),
    M("swap_handle_used_by_memoryerror", "swap",
      "swap_in takes the handle out of its book before the pool's free blocks are counted, so a MemoryError uses "
      "it up. Verified: swap_in(h) with one block short raises MemoryError, and swap_in(h) once blocks are free "
      "raises ValueError (contract: the handle is still good).",
      ((_IN, "            group = self._out.get(handle)\n", "            group = self._out.pop(handle, None)\n"),
       (_IN, "        del self._out[handle]\n", "")), "sw_atomic"),
    M("swap_out_no_decref", "swap",
      "swap_out copies the blocks and empties the group but never gives the references back: the pool's blocks "
      "stay in use. Verified: after swap_out of a 3-block sequence the pool's n_free is unchanged and each block "
      "has refcount 1 with no holder (contract: free).",
      ((_OUT, "            for b in s.blocks:\n                self.pool.decref(b)\n", ""),), "sw_out"),
    M("swap_in_unshared", "swap",
      "swap_in allocates one block per distinct CPU block but never increfs for the further entries, so a block "
      "the group shared comes back with refcount 1. Verified: 3 forks of a 2-block sequence swapped in: "
      "refcounts 1 (contract: 3).",
      ((_IN, "                if c in seen:\n                    self.pool.incref(new[c])\n", ""),), "sw_in"),
    M("swap_cpu_never_freed", "swap",
      "swap_in leaves the CPU blocks it copied back marked as used. Verified: after swap_out and swap_in of a "
      "2-block sequence n_free is n_blocks - 2 (contract: n_blocks).",
      ((_IN, "        self._cpu_free = sorted(self._cpu_free + order)\n", ""),), "sw_in"),
    M("swap_block_major", "swap",
      "The CPU storage is laid out block first, [n_blocks, L, B, H, Dh] (one CPU block one slab), not the "
      "pool's layout. Verified: SwapSpace(pool, 8).k.shape is (8, 2, 4, 4, 16) for TINY with block size 4 "
      "(contract: (2, 8, 4, 4, 16)); swapping works.",
      (("SwapSpace.__init__", "        shape = (cfg.n_layers, n_blocks, pool.block_size, cfg.n_heads, cfg.d_head)\n",
        "        shape = (n_blocks, cfg.n_layers, pool.block_size, cfg.n_heads, cfg.d_head)\n"),
       (_OUT, _COPY_OUT, "            self.k[c], self.v[c] = self.pool.k[:, b], self.pool.v[:, b]\n"),
       (_IN, _COPY_IN, "            self.pool.k[:, b], self.pool.v[:, b] = self.k[c], self.v[c]\n")), "sw_layout"),
    M("swap_in_counts_entries", "swap",
      "swap_in counts the group's table entries against pool.n_free, not its distinct blocks. Verified: 3 forks "
      "of a 2-block sequence with exactly 2 blocks free: MemoryError (contract: it fits).",
      ((_IN, "        if len(order) > self.pool.n_free:\n",
        "        if sum(len(table) for _, table in group) > self.pool.n_free:\n"),), "sw_atomic"),
    M("swap_out_repeats_accepted", "swap",
      "swap_out does not check that the group's sequences are distinct: a sequence listed twice has its blocks "
      "decref'd twice. Verified: swap_out([s, s]) succeeds (contract: ValueError, nothing changed).",
      ((_OUT, "        if not seqs or len({id(s) for s in seqs}) < len(seqs):\n", "        if not seqs:\n"),), "sw_errors"),
    M("swap_out_any_pool", "swap",
      "swap_out does not check that the sequences are of its pool. Verified: a group with a sequence of another "
      "pool is swapped out (contract: ValueError, nothing changed).",
      ((_OUT, "        if any(s.pool is not self.pool for s in seqs):\n"
              "            raise ValueError(\"every sequence must be of this swap space's pool\")\n", ""),), "sw_errors"),
    M("swap_out_copies_later", "swap",
      "swap_out only notes which pool block each CPU block stands for, and swap_in copies from the pool then: "
      "by that time the pool has handed those blocks out again. Verified: a swapped-out block overwritten by "
      "its next holder comes back with the new K/V (contract: the K/V it held).",
      ((_OUT, _COPY_OUT, "            self._source = {**getattr(self, '_source', {}), c: b}\n"),
       (_IN, _COPY_IN, "            src = self._source[c]\n"
                       "            self.pool.k[:, b], self.pool.v[:, b] = self.pool.k[:, src], self.pool.v[:, src]\n")),
      "sw_in"),
    M("swap_in_lengths_of_tables", "swap",
      "swap_in gives each sequence the length its table can hold (len(blocks) * B), not its old length. "
      "Verified: a 6-token sequence with block size 4 comes back with length 8 (contract: 6).",
      ((_IN, "            seq.blocks, seq.length = [new[c] for c in table], length\n",
        "            seq.blocks, seq.length = [new[c] for c in table], len(table) * self.pool.block_size\n"),), "sw_in"),
]

BY_NAME = {m.name: m for m in MUTANTS}
assert len(BY_NAME) == len(MUTANTS), "duplicate mutant names"
assert all(p in PARTS for m in MUTANTS for p in m.parts)
assert all(("Spans" in m.bug) == bool(m.also) for m in MUTANTS), "a mutant that spans parts says why (\"Spans ...\")"
assert all(c.split(".")[0] in m.parts for m in MUTANTS for c in m.checks), "a mutant's checks are of its parts"

# Every check earns its place (earns.py): a check no mutant catches alone among its part's checks
# says why here (check id -> the reason), e.g. "covered jointly with X because ...".
_POOL_VIEW = ("every Part 1 check but lowest_free_first judges the whole pool view (refcounts, n_used, n_free, "
              "peak_used) after each call (judges.pool_judge), so a bug in ")
_STEP_LOGITS = ("Part 2's logits checks judge the same logits of the same paged_step (1e-10), each on scripts that "
                "start with prefills and continue with steps: a bug in the step's arithmetic or positions shows in "
                "all of them; they differ in the shape of their inputs (")
_SHARING = ("Part 4's scripts are all judged by the contract's sharing rules on the submission's own tables "
            "(rules.sharing_violation: refcounts, copies, K/V read back, leaks after every action), so a bug in ")
JOINT = {
    "allocator.refcounts": _POOL_VIEW + "incref, decref or the counters shows in every script that makes those calls; "
                           "refcounts is the one made mostly of them",
    "allocator.peak_used": _POOL_VIEW + "peak_used shows after the first alloc of every script; peak_used's own "
                           "script (empty the pool, refill past the old peak) is where it is said plainly",
    "allocator.exhaustion": _POOL_VIEW + "a full pool shows wherever a script fills the pool (bad_ids' and "
                            "copy_block's full pools too)",
    "blockwise_attention.boundaries": "its lengths k*B - 1, k*B and k*B + 1 are where an off-by-one in the blocks "
                                      "or slots read shows; the tables and configs checks draw lengths that land on "
                                      "such boundaries too (length 1, a block's size, one more), so a boundary bug "
                                      "shows there as well",
    "paged_step.prefill": _STEP_LOGITS + "one-shot prompts here)",
    "paged_step.chunked_prefill": _STEP_LOGITS + "one prompt in chunks of 1 to 13 here)",
    "paged_step.decode_batches": _STEP_LOGITS + "mixed decode batches and a poked position here)",
    "paged_step.replays": "it judges, as Part 2's other checks judge any step_script, the runs Parts 4 and 5 compare "
                          "a submission with (grow, mirror and prefill actions: states forks and cache hits leave): a "
                          "step bug there is a step bug the other checks see too; the check is there so that a twin "
                          "is a graded call (strategic.py's twin_by_frame and twin_by_gc)",
    "copy_on_write.copy_when_needed": _SHARING + "when to copy shows in every script whose sharers write",
    "copy_on_write.n_minus_1": _SHARING + "the count of copies shows in every script with sharers that write",
    "copy_on_write.copied_data": _SHARING + "copied K/V shows in every script that reads after a copy",
    "copy_on_write.parallel_sampling": "the driver (lab/decoding.py) runs fork, copy-on-write and free, Part 4's "
                                       "own calls, on a prompt the scripts also cover: what breaks it breaks a "
                                       "sharing script first",
    "copy_on_write.beam_search": "the driver (lab/decoding.py) runs fork and free of beams, Part 4's own calls: "
                                 "what breaks it breaks a sharing script first",
    "prefix_cache.keys": "eviction's scripts insert and look up the same whole-prefix keys and compare insert's "
                         "count and the blocks cached, so a key bug shows in both",
}
# A sweep replays the calls of its part's targeted checks: it needs no mutant of its own and does not
# count against theirs (check id -> why).
SWEEPS = {
    "allocator.random_ops": "a sweep: long random sequences of the calls the targeted checks make (alloc, incref, "
                            "decref, copy_block, refcount, bad ids), on the same pool view; it is there for the "
                            "interleavings no targeted script writes out, so what it finds a targeted check finds too",
}
assert all(c.split(".")[0] in PARTS for c in {**JOINT, **SWEEPS}), "JOINT and SWEEPS name checks of the parts"
assert not set(JOINT) & set(SWEEPS), "a check is either covered jointly or a sweep"
