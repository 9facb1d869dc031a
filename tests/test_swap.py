"""Part 6 (bonus): preemption by swapping (SwapSpace).

Each test is a story on one SwapSpace (the bench below): groups of sequences the test builds itself
(it takes their blocks with pool.alloc, shares them with pool.incref and stores their K/V: no
paged_step, no fork), swapped out and in. Tables are compared up to renaming (a block named by its
first appearance, so which ids your allocator hands out, Part 1's, does not matter). After every call
the bench checks what every Part 6 call must do: a call given `raises` raises that and changes
nothing, any other succeeds, and every block's refcount is the number of table entries (and blocks
the test holds) naming it. A file without SwapSpace skips these tests: the bonus is extra credit."""
import numpy as np
import pytest

import rules
import scenarios as sc
import support

pytestmark = pytest.mark.swap
SECTION = "Part 6 (bonus): preemption by swapping"


@pytest.fixture(autouse=True)
def _bonus(pk):
    support.bonus_attempted(pk, "swap")


class SwapBench:
    """One SwapSpace on a pool of your BlockPool (scenarios.SwapRun, what the grader's scripts run too),
    called the way a test reads it; sequences are numbered as they appear."""

    def __init__(self, pk, block_size=4, n_blocks=16, cpu_blocks=8):
        waits = support.needs_part1(pk, "this test of the swap space")
        if waits:
            support.wait(waits)
        self.run, self.B = sc.SwapRun(pk, None, n_blocks, block_size, cpu_blocks), block_size
        self.stored = {}        # seq -> its K/V when the test made it (what must come back)

    def _call(self, action, raises=None):
        rec = self.run.call(action)
        ops = self.run.records
        where = f"after action {len(ops)} of {len(ops)}, {rules.describe_swap_actions(ops)[-1]}"
        (row,) = rules.part6_view({"records": ops[-2:]})[-1:]
        got = "no error" if rec["error"] is None else support.error_text(rec["error"])
        if raises and row["error"] != raises:
            support.fail(f"{where}: expected {raises}, got {got}", SECTION)
        if not raises and rec["error"] is not None:
            support.fail(f"{where}: expected it to succeed, but it raised {got}", SECTION)
        if raises and not row.get("unchanged", True):
            support.fail(f"{where}: a call that raised {raises} must change nothing, but the tables, lengths, "
                         "refcounts or the space's n_free, n_out, n_in changed", SECTION)
        if row["references"]:
            support.fail(f"{where}: refcounts that are not the table entries naming each block (block, refcount "
                         f"minus its entries): {row['references']}", SECTION)
        return rec

    def _made(self, action):
        rec = self._call(action)
        s = rec["result"]
        self.stored[s] = sc.gathered_kv(self.run.seqs[s])
        return s

    def seq(self, n):
        """A sequence of n positions in blocks of its own, K/V stored by the test; its number."""
        return self._made(["seq", n, len(self.run.seqs) + 1])

    def fork(self, s):
        """A sequence sharing every block of s (pool.incref each), as fork would."""
        return self._made(["fork", s])

    def branch(self, s, k, n):
        """A sequence sharing s's first k (full) blocks, then n positions in blocks of its own."""
        return self._made(["branch", s, k, n, len(self.run.seqs) + 1])

    def swap_out(self, group, raises=None):
        """space.swap_out of these sequences ("other": one of another pool); the handle's number."""
        return self._call(["swap_out", group], raises)["result"]

    def swap_in(self, h, raises=None):
        """space.swap_in(handle h); the numbers of the sequences it returned."""
        rec = self._call(["swap_in", h], raises)
        if raises is None:
            support.equal("swap_in returns sequences of the space's pool", [True] * len(rec["result"]["seqs"]),
                          rec["result"]["same_pool"], SECTION)
            return rec["result"]["seqs"]
        return None

    def hold_until(self, k):
        self._call(["hold_until", k])

    def unhold(self):
        self._call(["unhold"])

    def scribble(self):
        """The test takes every free block, overwrites its K/V and gives it back."""
        self._call(["scribble", 99])

    # ------------------------------------------------------------------ what the test reads
    def tables(self, seqs):
        """The tables of these sequences up to renaming (each block named by its first appearance)."""
        return rules.renamed([self.run.records[-1]["tables"][s] for s in seqs])

    def lengths(self, seqs):
        return [self.run.records[-1]["lengths"][s] for s in seqs]

    def counters(self):
        """The space's (n_free, n_out, n_in)."""
        rec = self.run.records[-1]
        return rec["n_free"], rec["n_out"], rec["n_in"]

    def refcounts(self, record):
        """The refcounts, now, of the blocks that were in the tables after `record` (the bench's records
        count from 0: one per call)."""
        rec, now = self.run.records[record], rules.free_as_zero(self.run.records[-1]["refcounts"])
        return [now[b] for t in rec["tables"] for b in t]       # (whether refcount() of a free block says 0 is Part 1's)

    def taken(self):
        """The ids pool.alloc handed out during the last swap_in, named by their first appearance in the
        tables it returned: [0, 1, ...] when it took them in that order."""
        rec = self.run.records[-1]
        return rules.part6_view({"records": [rec]})[0]["returned"]["taken"]

    def same_kv(self, new, old):
        """New sequences hold the K/V the old ones had when the test made them."""
        for n, o in zip(new, old):
            why = rules.kv_difference(self.stored[o], sc.gathered_kv(self.run.seqs[n]))
            if why:
                support.fail(f"seq {n} (seq {o} swapped in) read through its table: {why}", SECTION)


def check(what, expected, got):
    support.equal(what, expected, got, SECTION)


# ------------------------------------------------------------------------------------ the stories
def test_a_new_swap_space(pk):
    bench = SwapBench(pk, block_size=4, cpu_blocks=8)
    layout = bench.run.layout
    check("k's shape [n_layers, n_blocks, block_size, n_heads, d_head] (TINY, 8 CPU blocks of 4)", [2, 8, 4, 4, 16],
          layout["k_shape"])
    check("k and v: float64 zeros, two separate arrays", ("float64", "float64", True, True),
          (layout["k_dtype"], layout["v_dtype"], layout["zeros"], layout["distinct"]))
    check("pool, n_blocks", (True, 8), (layout["same_pool"], layout["n_blocks"]))
    check("n_free, n_out, n_in", (8, 0, 0), (layout["n_free"], layout["n_out"], layout["n_in"]))


def test_a_swapped_out_sequence_leaves_the_pool_and_comes_back(pk):
    """10 positions in blocks of 4: 3 blocks go to 3 CPU blocks and the pool gets them back; swap_in gives
    a new sequence of length 10 in 3 blocks holding the same K/V."""
    bench = SwapBench(pk)
    s = bench.seq(10)
    bench.swap_out([s])
    check("seq 0 after swap_out: table and length", ([[]], [0]), (bench.tables([s]), bench.lengths([s])))
    check("the refcounts of its 3 blocks after swap_out (every entry given back)", [0, 0, 0], bench.refcounts(0))
    check("the space's n_free, n_out, n_in after swap_out", (5, 3, 0), bench.counters())
    (new,) = bench.swap_in(0)
    check("the sequence swap_in returned: table up to renaming, length", ([[0, 1, 2]], [10]),
          (bench.tables([new]), bench.lengths([new])))
    check("the space's n_free, n_out, n_in after swap_in", (8, 3, 3), bench.counters())
    bench.same_kv([new], [s])


def test_forks_come_back_sharing_their_blocks(pk):
    """3 forks of 6 positions (a full block and a partly filled one): 2 distinct blocks under 6 entries.
    Each is copied once, and comes back shared by the 3: refcounts 3 again, and a later decode copies the
    shared last block as usual (Part 4)."""
    bench = SwapBench(pk)
    group = [bench.seq(6), bench.fork(0), bench.fork(0)]
    bench.swap_out(group)
    check("the space's n_free, n_out after swapping out 3 forks of 2 blocks (each distinct block once)", (6, 2),
          bench.counters()[:2])
    new = bench.swap_in(0)
    check("the tables swap_in returned, up to renaming", [[0, 1], [0, 1], [0, 1]], bench.tables(new))
    check("their blocks' refcounts (one per entry naming them)", [3, 3], bench.refcounts(-1)[:2])
    bench.same_kv(new, group)


def test_a_block_held_outside_the_group_stays_with_its_holder(pk):
    """Beams of one prompt: seq 0 (3 full blocks) stays; seqs 1 and 2 share its first 2 blocks and are
    swapped out. Those 2 blocks lose the group's references and stay seq 0's; they are copied out all the
    same, and come back as blocks of the group's own, shared by seqs 1 and 2."""
    bench = SwapBench(pk, block_size=4)
    bench.seq(12)
    group = [bench.branch(0, 2, 5), bench.branch(0, 2, 2)]
    bench.swap_out(group)
    check("seq 0's blocks' refcounts after the others left", [1, 1, 1], bench.refcounts(-1)[:3])
    check("the space's n_out (2 shared blocks, 2 + 1 of their own)", 5, bench.counters()[1])
    new = bench.swap_in(0)
    check("the tables swap_in returned, up to renaming", [[0, 1, 2, 3], [0, 1, 4]], bench.tables(new))
    check("no block of seq 0 among them", set(), set(bench.run.seqs[0].blocks) & {b for n in new
                                                                                  for b in bench.run.seqs[n].blocks})
    bench.same_kv(new, group)


def test_swap_in_takes_blocks_in_order_of_first_appearance(pk):
    """swap_out([seq 1, seq 0]): seq 1's table first. Its blocks come back first (pool.alloc once per
    distinct block, in that order), whatever the pool's free blocks look like."""
    bench = SwapBench(pk, block_size=2, n_blocks=12)
    bench.seq(5)
    bench.branch(0, 1, 3)
    bench.hold_until(6)
    bench.swap_out([1, 0])
    bench.unhold()
    bench.hold_until(9)
    new = bench.swap_in(0)
    check("the tables swap_in returned (seq 1's, then seq 0's), up to renaming", [[0, 1, 2], [0, 3, 4]],
          bench.tables(new))
    check("the blocks pool.alloc handed out during swap_in, named by first appearance", [0, 1, 2, 3, 4], bench.taken())
    bench.same_kv(new, [1, 0])


def test_the_pool_reuses_what_swap_out_freed(pk):
    """Between swap_out and swap_in the pool hands the freed blocks to others, who overwrite them: what
    comes back is what the group had (a copy in CPU blocks, not a note of where it was)."""
    bench = SwapBench(pk)
    group = [bench.seq(9), bench.fork(0)]
    bench.swap_out(group)
    bench.scribble()
    bench.same_kv(bench.swap_in(0), group)


def test_a_group_too_big_for_the_cpu_space_changes_nothing(pk):
    """3 CPU blocks: 3 forks of 2 blocks take 2 (distinct blocks count: their 6 entries would not fit); a
    2-block sequence does not fit the 1 left: MemoryError, nothing changed (not one CPU block taken); a
    1-block one fits it exactly. Once the forks are back, the 2-block one fits."""
    bench = SwapBench(pk, cpu_blocks=3)
    bench.seq(6), bench.fork(0), bench.fork(0), bench.seq(5), bench.seq(3)
    bench.swap_out([0, 1, 2])
    bench.swap_out([3], raises="MemoryError")
    bench.swap_out([4])
    bench.swap_in(0)
    bench.swap_out([3])


def test_swap_in_waits_for_free_blocks(pk):
    """A group of 3 distinct blocks with 2 free: MemoryError, nothing changed, and the handle is still
    good: with 3 free it comes back (3 entries more would not matter)."""
    bench = SwapBench(pk, n_blocks=10)
    group = [bench.seq(10), bench.fork(0)]
    bench.swap_out(group)
    bench.hold_until(2)
    bench.swap_in(0, raises="MemoryError")
    bench.unhold()
    bench.hold_until(3)
    bench.same_kv(bench.swap_in(0), group)


def test_bad_calls_raise_value_error_and_change_nothing(pk):
    bench = SwapBench(pk)
    bench.seq(5), bench.seq(9)
    bench.swap_out([], raises="ValueError")
    bench.swap_out([0, 0], raises="ValueError")
    bench.swap_out([0, "other"], raises="ValueError")
    bench.swap_in("made_up", raises="ValueError")
    bench.swap_in("other", raises="ValueError")
    bench.swap_out([1])
    bench.swap_in(0)
    bench.swap_in(0, raises="ValueError")


def test_decoding_after_swap_in_gives_the_same_logits(pk):
    """A prompt of 7 tokens stepped with your paged_step, forked by the test, swapped out and in: the next
    decode step gives the logits it gives without the swap (and copies the shared last block as usual)."""
    benches = {False: SwapBench(pk), True: SwapBench(pk)}       # (a pool that cannot be built: Part 1's, said first)
    if not support.part2_works(pk):
        support.wait(support.needs_part2(pk, "this comparison"))
    if not support.copies_work(pk):         # the decode copies the shared last block: Part 4's copy-on-write
        support.wait(support.needs_copies(pk))
    prm, prompt = sc.params(sc.config(), 0), support.tokens(7, 21)

    def decoded(swap):
        bench = benches[swap]
        seq = pk.PagedSequence(bench.run.pool)
        pk.paged_step(prm, sc.config(), [seq], [prompt])
        bench.run.seqs.append(seq)
        bench.stored[0] = sc.gathered_kv(seq)
        seqs = [seq, bench.run.seqs[bench.fork(0)]]
        if swap:
            bench.swap_out([0, 1])
            seqs = [bench.run.seqs[s] for s in bench.swap_in(0)]
        return pk.paged_step(prm, sc.config(), seqs, [[3], [4]])
    for s, (e, g) in enumerate(zip(decoded(False), decoded(True))):
        support.close(f"seq {s}'s logits after swap_in", np.asarray(e), np.asarray(g), support.TOL_LOGITS, SECTION)
