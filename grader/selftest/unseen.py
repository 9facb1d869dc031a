"""Bugs the grader was not built against: how far one bug's charge spreads (issue 14's cascade).

    python -m grader.selftest.unseen [--jobs 2] [--seed N] [--only bugs|systematic] [--json PATH]

mutants.py is the corpus the grader was tuned on; these are written fresh, in the same form (edits on
the reference's text, each `find` exactly once in the function it names), so they measure what the grader does with bugs it has
not seen: realistic single-part bugs (BUGS), and systematic small mutations of the allocator
(`systematic`: every comparison and counter of BlockPool changed, every statement of it dropped, one
at a time). Each is graded by the grader's command line (run.grade); the command prints, for each,
the points lost per part, and the cascade: the bugs that lose points outside their part. It measures,
it does not enforce (no threshold: the figures go in the issue), so it is not part of `make check`.
A bug that loses nothing is listed too (a survivor: the hidden suites do not see it).
"""
import argparse
import concurrent.futures
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.selftest import mutants

PARTS = mutants.PARTS
EPS = 1e-6


@dataclass(frozen=True)
class Bug:
    name: str
    part: str
    what: str
    edits: tuple
    also: tuple = ()        # parts the bug truly spans (its cascade there is expected)


B = Bug
_BW_SCORES = 'scores.append(np.einsum("hd,mhd->hm", q, seq.pool.k[layer, b, :m]) / np.sqrt(q.shape[-1]))'
_WRITE_K = "pool.k[layer, blocks[:, start:], slots[start:]] = k"
_WRITE_V = "pool.v[layer, blocks[:, start:], slots[start:]] = v"
_ATTN = "x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start))"
_EMBED = "x = embed(params, cfg, np.stack([chunks[i] for i in idx]), start)"
_NEW_LOOP = "        for _ in range(self._new_blocks(n)):\n            self.blocks.append(self.pool.alloc())\n"
_NEEDS = "return self.length % self.pool.block_size != 0 and self.pool.refcount(self.blocks[-1]) > 1"

BUGS = [
    # ------------------------------------------------------------------ Part 1
    B("incref_rejects_shared", "allocator", "incref refuses a block that is already shared (refcount > 1)",
      (("BlockPool.incref", "        self._ref[self._in_use(b)] += 1\n",
        "        b = self._in_use(b)\n        if self._ref[b] > 1:\n            raise ValueError(f\"block {b} is shared\")\n"
        "        self._ref[b] += 1\n"),)),
    B("refcount_rejects_block0", "allocator", "refcount's id check starts at 1: refcount(0) raises ValueError",
      (("BlockPool.refcount", "        if not 0 <= b < self.n_blocks:\n            raise ValueError(f\"block id {b} is outside [0, {self.n_blocks})\")\n"
        "        return self._ref[b]", "        if not 0 < b < self.n_blocks:\n            raise ValueError(f\"block id {b} is outside "
        "[0, {self.n_blocks})\")\n        return self._ref[b]"),)),
    B("in_use_rejects_last", "allocator", "the in-use check compares with n_blocks - 1: the last block is 'outside'",
      (("BlockPool._in_use", "        if not 0 <= b < self.n_blocks:\n            raise ValueError(f\"block id {b} is outside [0, {self.n_blocks})\")\n"
        "        if self._ref[b] == 0:", "        if not 0 <= b < self.n_blocks - 1:\n            raise ValueError(f\"block id {b} is "
        "outside [0, {self.n_blocks})\")\n        if self._ref[b] == 0:"),)),
    B("never_hands_out_0", "allocator", "the free list starts at 1 (block 0 'reserved' as a null block, as in vLLM v1)",
      (("BlockPool.__init__", "self._free = list(range(n_blocks))", "self._free = list(range(1, n_blocks))"),)),
    B("peak_before_count", "allocator", "peak_used is updated before n_used is incremented (one short)",
      (("BlockPool.alloc", "        self._used += 1\n        self.peak_used = max(self.peak_used, self._used)\n",
        "        self.peak_used = max(self.peak_used, self._used)\n        self._used += 1\n"),)),
    B("full_pool_valueerror", "allocator", "alloc on a full pool raises ValueError, not MemoryError",
      (("BlockPool.alloc", "            raise MemoryError(f\"all {self.n_blocks} blocks are in use\")",
        "            raise ValueError(f\"all {self.n_blocks} blocks are in use\")"),)),
    B("copy_block_shares", "allocator", "copy_block hands back the source itself with one more reference (no copy). "
      "Spans copy_on_write: Part 4 owns that a copied block holds its source's K/V (mutants.py's copy_block_no_v)",
      (("BlockPool.copy_block", "        b = self._in_use(b)\n        new = self.alloc()\n", "        b = self._in_use(b)\n        self._ref[b] += 1\n"
        "        new = b\n"),), ("copy_on_write",)),
    B("v_pool_float32", "allocator", "the V storage is float32 (K float64)",
      (("BlockPool.__init__", "        self.v = np.zeros(shape)\n", "        self.v = np.zeros(shape, dtype=np.float32)\n"),)),
    B("n_free_from_heap", "allocator", "n_free is the free list's length, kept in sync except after a failed alloc",
      (("BlockPool.n_free", "        return self.n_blocks - self._used\n", "        return len(self._free) - (self.peak_used == self.n_blocks)\n"),)),
    B("decref_free_is_noop", "allocator", "decref of a free block returns quietly instead of ValueError",
      (("BlockPool.decref", "        b = self._in_use(b)\n        self._ref[b] -= 1\n",
        "        if self.refcount(b) == 0:\n            return\n        b = self._in_use(b)\n        self._ref[b] -= 1\n"),)),
    # ------------------------------------------------------------------ Part 2
    B("read_in_physical_order", "paged_step", "read gathers the table's blocks in physical order (sorted), "
      "not table order, and the step gathers so too: right only while every table is increasing",
      (("PagedSequence.read", "_slots(self.blocks, ", "_slots(sorted(self.blocks), "),
       ("paged_step", "_slots([seqs[i].blocks for i in idx]", "_slots([sorted(seqs[i].blocks) for i in idx]"))),
    B("positions_mod_block", "paged_step", "positions restart at 0 in every block (start % block_size)",
      (("paged_step", _EMBED, _EMBED.replace(", start)", ", start % pool.block_size)")),)),
    B("no_causal_mask", "paged_step", "no causal mask within a chunk: every query sees the whole chunk",
      (("paged_step", _ATTN, _ATTN.replace("start))", "K.shape[-3]))")),)),
    B("kv_slots_swapped", "paged_step", "K is written to pool.v and V to pool.k (and read back swapped)",
      (("paged_step", _WRITE_K, _WRITE_K.replace("pool.k", "pool.v")), ("paged_step", _WRITE_V, _WRITE_V.replace("pool.v", "pool.k")))),
    B("reserve_one_short", "paged_step", "reserve allocates one block fewer when the chunk spans more than a block",
      (("PagedSequence.reserve", _NEW_LOOP, "        for _ in range(max(0, self._new_blocks(n) - (n > self.pool.block_size))):\n"
                   "            self.blocks.append(self.pool.alloc())\n"),)),
    B("reserve_one_extra", "paged_step", "reserve takes one extra block for an empty sequence (a 'spare')",
      (("PagedSequence.reserve", _NEW_LOOP, "        for _ in range(self._new_blocks(n) + (not self.blocks and self.length == 0)):\n"
                   "            self.blocks.append(self.pool.alloc())\n"),)),
    B("read_ignores_table", "paged_step", "read takes blocks 0, 1, 2... of the pool, not the table's",
      (("PagedSequence.read", "        b, s = _slots(self.blocks, self.pool.block_size, 0, length)\n",
        "        b, s = _slots(list(range(len(self.blocks))), self.pool.block_size, 0, length)\n"),)),
    B("only_first_length", "paged_step", "a batch of equal sequences updates only its first sequence's length",
      (("paged_step", "            seqs[i].length = start + T\n", "            seqs[idx[0]].length = start + T\n"),)),
    B("precheck_strict", "paged_step", "the step's check uses >= : a step needing exactly the free blocks fails",
      (("paged_step", "        if n > pool.n_free:\n            raise MemoryError(f\"this step needs",
        "        if n >= pool.n_free and n:\n            raise MemoryError(f\"this step needs"),)),
    B("token_zero_rejected", "paged_step", "token id 0 is rejected (ids checked >= 1)",
      (("_check_chunk", "if arr.min() < 0 or arr.max() >= cfg.vocab:", "if arr.min() < 1 or arr.max() >= cfg.vocab:"),)),
    B("last_row_only", "paged_step", "the step returns only the last row of logits for every chunk",
      (("paged_step", "            out[i] = logits[g]\n", "            out[i] = logits[g][-1:]\n"),)),
    B("write_shifted", "paged_step", "write stores K/V one position late (start + 1)",
      (("PagedSequence.write", "        b, s = _slots(self.blocks, self.pool.block_size, start, start + len(k))\n",
        "        b, s = _slots(self.blocks, self.pool.block_size, start + 1, start + 1 + len(k))\n"),)),
    B("groups_across_pools", "paged_step", "sequences are batched by position alone, across pools",
      (("paged_step", "groups.setdefault((id(seq.pool), seq.length, len(chunk)), []).append(i)",
        "groups.setdefault((id(seqs[0].pool), seq.length, len(chunk)), []).append(i)"),)),
    B("reserve_zero_ok", "paged_step", "reserve(0) and reserve(-1) return quietly (no ValueError)",
      (("PagedSequence.reserve", "        if n < 1:\n            raise ValueError(f\"reserve needs n >= 1, got {n}\")\n",
        "        if n < 1:\n            return\n"),)),
    B("length_before_check", "paged_step", "the token check runs after the chunk's length was counted as stored",
      (("_check_chunk", "    if seq.length + arr.size > cfg.max_len:", "    if seq.length + arr.size > cfg.max_len + 1:"),)),
    # ------------------------------------------------------------------ Part 3
    B("bw_one_stale_slot", "blockwise_attention", "a partly filled last block is read one slot too far (a stale slot)",
      (("blockwise_attention", "b, m = seq.blocks[i], min(B, L - i * B)", "b, m = seq.blocks[i], min(B, L - i * B + 1)"),)),
    B("bw_keys_from_v", "blockwise_attention", "scores are taken against V instead of K",
      (("blockwise_attention", _BW_SCORES, _BW_SCORES.replace("seq.pool.k[", "seq.pool.v[")),)),
    B("bw_physical_is_logical", "blockwise_attention", "block i is read at physical id i (the table ignored)",
      (("blockwise_attention", "b, m = seq.blocks[i], min(B, L - i * B)", "b, m = i, min(B, L - i * B)"),)),
    B("bw_total_over_heads", "blockwise_attention", "the softmax denominator sums over every head",
      (("blockwise_attention", "total = np.sum([w.sum(axis=-1) for w in weights], axis=0)[:, None]",
        "total = np.sum([w.sum() for w in weights])"),)),
    B("bw_empty_zeros", "blockwise_attention", "length 0 returns zeros instead of raising ValueError",
      (("blockwise_attention", '        raise ValueError("blockwise_attention needs a sequence of length >= 1")\n',
        "        return np.zeros_like(q)\n"),)),
    # ------------------------------------------------------------------ Part 4
    B("copy_when_not_shared", "copy_on_write", "copy-on-write copies a partly filled last block even when nobody shares it",
      (("PagedSequence._needs_copy", _NEEDS, _NEEDS.replace("> 1", ">= 1")),)),
    B("cow_needs_three", "copy_on_write", "copy-on-write only when 3 or more hold the block",
      (("PagedSequence._needs_copy", _NEEDS, _NEEDS.replace("> 1", "> 2")),)),
    B("cow_after_new_blocks", "copy_on_write", "reserve appends its new blocks before checking the last block "
      "for sharing, so a chunk that needs a new block writes into the shared one",
      (("PagedSequence.reserve", "        if self._needs_copy():\n            shared = self.blocks[-1]\n",
        "        for _ in range(self._new_blocks(n)):\n            self.blocks.append(self.pool.alloc())\n"
        "        if self._needs_copy():\n            shared = self.blocks[-1]\n"),)),
    B("fork_increfs_last_only", "copy_on_write", "fork increfs only the last block",
      (("PagedSequence.fork", "        for b in self.blocks:\n            self.pool.incref(b)\n        child.blocks",
        "        for b in self.blocks[-1:]:\n            self.pool.incref(b)\n        child.blocks"),)),
    B("free_skips_last", "copy_on_write", "free decrefs every block but the last (a leak)",
      (("PagedSequence.free", "        for b in self.blocks:\n            self.pool.decref(b)\n", "        for b in self.blocks[:-1]:\n"
        "            self.pool.decref(b)\n"),)),
    B("cow_boundary_off", "copy_on_write", "copy-on-write tests (length + 1) % B: off by one at the block boundary",
      (("PagedSequence._needs_copy", _NEEDS, _NEEDS.replace("self.length % self.pool.block_size != 0",
                               "bool(self.blocks) and (self.length + 1) % self.pool.block_size != 0")),)),
    B("fork_child_len_blocks", "copy_on_write", "fork gives the child only the full blocks (the partial one is new)",
      (("PagedSequence.fork", "        child.blocks, child.length = list(self.blocks), self.length\n",
        "        child.blocks, child.length = list(self.blocks), self.length\n"
        "        if self.length % self.pool.block_size:\n            self.pool.decref(child.blocks[-1])\n"
        "            child.blocks[-1] = self.pool.copy_block(self.blocks[-1])\n"),)),
    # ------------------------------------------------------------------ Part 5
    B("lookup_skips_block0", "prefix_cache", "lookup ignores the first block (starts matching at block 1)",
      (("PrefixCache.lookup", "        for key in self._keys(tokens)[:(len(tokens) - 1) // self.pool.block_size]:\n",
        "        for key in self._keys(tokens)[1:(len(tokens) - 1) // self.pool.block_size]:\n"),)),
    B("evict_negative_ok", "prefix_cache", "evict(-1) returns 0 instead of ValueError",
      (("PrefixCache.evict", "        if n < 0:\n            raise ValueError(f\"cannot evict {n} blocks\")\n", "        n = max(n, 0)\n"),)),
    B("hits_not_increfed", "prefix_cache", "cached_prefill puts its hits in the table without a reference of its own",
      (("cached_prefill", "    for b in hits:\n        pool.incref(b)\n", ""),)),
    B("insert_no_recency", "prefix_cache", "insert does not refresh recency (only new blocks go to the end)",
      (("PrefixCache.insert", "        for key in reversed(keys):   # one use: block 0 last, so the tail of a chain is evicted first\n"
        "            if key in self._block:\n                self._lru.move_to_end(self._block[key])\n", ""),)),
    B("evict_one_more", "prefix_cache", "cached_prefill evicts one block more than its shortfall",
      (("cached_prefill", "    cache.evict(max(0, short))\n", "    cache.evict(max(0, short + 1) if short > 0 else 0)\n"),)),
    B("hit_tokens_minus_one", "prefix_cache", "n_hit_tokens counts the hit tokens less one per request",
      (("cached_prefill", "    cache.n_hit_tokens += len(hits) * pool.block_size\n",
        "    cache.n_hit_tokens += max(0, len(hits) * pool.block_size - 1)\n"),)),
    B("insert_first_block_only", "prefix_cache", "insert caches only the first new block of a call",
      (("PrefixCache.insert", "        new = [(key, b) for key, b in zip(keys, ids) if key not in self._block and b not in self._lru]\n",
        "        new = [(key, b) for key, b in zip(keys, ids) if key not in self._block and b not in self._lru][:1]\n"),)),
    # ------------------------------------------------------------------ Part 6
    B("swap_in_reversed", "swap", "swap_in returns the group's sequences last first",
      (("SwapSpace.swap_in", "        return seqs\n", "        return seqs[::-1]\n"),)),
    B("swap_out_keeps_tables", "swap", "swap_out gives the blocks back and sets length 0 but leaves the tables",
      (("SwapSpace.swap_out", "            s.blocks, s.length = [], 0\n", "            s.length = 0\n"),)),
    B("swap_in_k_only", "swap", "swap_in copies K back but not V",
      (("SwapSpace.swap_in", "            self.pool.k[:, b], self.pool.v[:, b] = self.k[:, c], self.v[:, c]\n",
        "            self.pool.k[:, b] = self.k[:, c]\n"),)),
    B("swap_out_counts_entries", "swap", "swap_out counts the group's table entries against n_free, not its distinct blocks",
      (("SwapSpace.swap_out", "        if len(distinct) > self.n_free:\n",
        "        if sum(len(s.blocks) for s in seqs) > self.n_free:\n"),)),
]
BY_NAME = {b.name: b for b in BUGS}
assert len(BY_NAME) == len(BUGS)


# ------------------------------------------------------------------ systematic allocator mutations
_OPERATORS = (("==", "!="), ("<=", "<"), (" < ", " <= "), (">=", ">"), ("+= 1", "+= 2"), ("-= 1", "-= 2"),
              ("== 0", "== 1"), (" 0 <= b", " 1 <= b"), ("b < self.n_blocks", "b < self.n_blocks - 1"),
              ("max(", "min("), ("return self._ref[b]", "return self._ref[b] + 1"))


def _pool_span(text):
    start = text.index("class BlockPool")
    return start, text.index("\n# ------", start)


_COPY_DATA = ("self.k[:, new] = self.k[:, b]", "self.v[:, new] = self.v[:, b]")


def owner(name):
    """The part a systematic mutation must cost: Part 1's, but a copy's data is Part 4's (as in mutants.py)."""
    return "copy_on_write" if any(d[:12] in name for d in _COPY_DATA) else "allocator"


def systematic():
    """Small mutations of BlockPool, one at a time: each operator at each place it occurs, each plain
    statement dropped. Names say what changed and on which line of the reference."""
    text = mutants.reference_text()
    lo, hi = _pool_span(text)
    out = {}
    for find, repl in _OPERATORS:
        for m in re.finditer(re.escape(find), text[lo:hi]):
            at = lo + m.start()
            line = text.count("\n", 0, at) + 1
            out[f"L{line}:{find.strip()}->{repl.strip()}"] = text[:at] + repl + text[at + len(find):]
    starts = [lo + m.start() for m in re.finditer(r"(?m)^ {8,}\S.*\n", text[lo:hi])]
    for at in starts:
        end = text.index("\n", at) + 1
        stmt = text[at:end].strip()
        if stmt.startswith(("def ", "if ", "for ", "return", "raise", "@", "#", "else", "b = ")) or stmt.endswith(":"):
            continue
        line = text.count("\n", 0, at) + 1
        out[f"L{line}:drop {stmt[:40]}"] = text[:at] + " " * (len(text[at:end]) - len(text[at:end].lstrip()))  \
            + "pass\n" + text[end:]
    return out




# ------------------------------------------------------------------ measuring
def measure(named, seed, jobs):
    """Grade {name: (part, also, text)}; {name: {"lost": {part: points}, "score", "problems"}}."""
    from grader.selftest import run
    if seed:
        run.GRADER_ARGS[:] = ["--seed", str(seed)]
    root = Path(tempfile.mkdtemp(prefix="cs349e-unseen-"))
    try:
        subs = [run.Sub("unseen", name, text, key=f"unseen-{i}") for i, (name, (_, _, text)) in enumerate(named.items())]
        (root / "logs").mkdir(parents=True)
        for s in subs:
            d = root / "subs" / s.key
            d.mkdir(parents=True)
            s.path, s.results = d / "paged_kv.py", d / "results.json"
            s.path.write_text(s.text)
        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            list(pool.map(lambda s: run.grade(s, root), subs))
        return {s.name: {"lost": {p: round(s.lost(p), 3) for p in run.PARTS} if s.data else None,
                         "score": s.score, "problems": s.problems} for s in subs}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(named, found):
    """Lines: per bug its losses per part, flagged when it loses outside its parts; and the totals."""
    lines, spread, survived, broken = [], [], [], []
    for name, (part, also, _) in named.items():
        got = found[name]
        if got["lost"] is None:
            broken.append(name)
            lines.append(f"{part:20s} {name:44s} NOT GRADED: {got['problems'][:1]}")
            continue
        lost = {p: v for p, v in got["lost"].items() if v > EPS}
        outside = {p: v for p, v in lost.items() if p not in (part, *also)}
        if not lost:
            survived.append(name)
        if outside:
            spread.append((name, outside, lost.get(part, 0.0)))
        lines.append(f"{part:20s} {name:44s} " + (", ".join(f"{p} {v:.2f}" for p, v in lost.items()) or "survives")
                     + (f"   CASCADE {outside}" if outside else ""))
    return lines, spread, survived, broken


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("bugs", "systematic"))
    ap.add_argument("--json", help="write every bug's losses here")
    ap.add_argument("--names", help="only these (comma-separated names)")
    args = ap.parse_args(argv)
    named = {}
    if args.only in (None, "bugs"):
        named.update({b.name: (b.part, b.also, mutants.apply(b)) for b in BUGS})
    if args.only in (None, "systematic"):
        named.update({f"sys {k}": (owner(k), (), t) for k, t in systematic().items()})
    if args.names:
        named = {k: v for k, v in named.items() if k in args.names.split(",")}
    t0 = time.monotonic()
    found = measure(named, args.seed, args.jobs)
    wall = time.monotonic() - t0
    lines, spread, survived, broken = report(named, found)
    print("\n".join(lines))
    for kind, keys in (("realistic bugs", [n for n in named if not n.startswith("sys ")]),
                       ("systematic allocator mutations", [n for n in named if n.startswith("sys ")])):
        if not keys:
            continue
        killed = [n for n in keys if n not in survived and n not in broken]
        out = [s for s in spread if s[0] in keys]
        bonus = [s for s in out if set(s[1]) == {"prefix_cache"}]
        silent = [s for s in out if s[2] <= EPS]
        print(f"\n{kind} (seed {args.seed}): {len(keys)}, {len(killed)} lose points; {len(out)} of {len(killed)} lose "
              f"points outside their part ({len(bonus)} only in the bonus); {len(silent)} of those lose nothing in "
              f"their own part; survivors {len([n for n in survived if n in keys])}; not graded "
              f"{len([n for n in broken if n in keys])}")
        for name, where, own in out:
            print(f"  cascade: {name}: {where} (own part {own:.2f})")
    print(f"\nwall time {wall:.0f} s for {len(named)} gradings")
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": args.seed, "found": found, "wall": wall}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
