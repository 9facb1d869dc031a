"""Part 4's test bench: your sequences forked, grown and freed on a pool of your BlockPool, with the
contract's rules checked after every call.

`grow(seq, n)` stands for a step without paged_step (how many blocks a chunk needs is Part 2's):
reserve, at most a block at a time (a new sequence's first blocks the test takes with pool.alloc),
then the test stores random K/V for the n new positions through the table and sets length += n.
After every call the bench checks, on the tables and refcounts your pool shows, the rules of fork,
free and copy-on-write (rules.sharing_violation, which the grader uses too), and that every
sequence reads back, through its table, exactly the K/V the test stored for it. Which ids your
allocator picks and the pool's counters are Part 1's, and are never compared here. Messages name
the sequences seq 0, seq 1, ... in the order the test made them, and each call by its number.
"""
import pytest

import explain
import rules
import scenarios as sc
import support

SECTION = "Part 4: sharing and copy-on-write"


def fail(message):
    support.fail(message, SECTION)


class ForkBench:
    """Calls on your sequences, each recorded as the plain data the rules read (tables, lengths,
    refcounts, K/V gathered from storage), in the scenarios' own form."""

    def __init__(self, pk, block_size=4, n_blocks=64):
        waits = support.needs_part1(pk, "this test of sharing")
        if waits:
            support.wait(waits)
        self.pk, self.B, self.n_blocks, self.cfg = pk, block_size, n_blocks, sc.config(None)
        self.params = sc.params(self.cfg, 0)
        self.pool = sc.working_pool(pk, self.cfg, n_blocks, block_size)
        self.seqs, self.records, self.stored, self.stepped = [], [], support.Stored(), False

    def new_sequence(self):
        """PagedSequence(pool)."""
        return self._call(["new"], lambda: self._add(sc.build("PagedSequence", self.pk.PagedSequence, self.pool)))

    def fork(self, seq):
        """seq.fork(): the child shares every block (each refcount + 1), with the same length."""
        return self._call(["fork", self.index(seq)], lambda: self._add(seq.fork()))

    def free(self, seq):
        """seq.free(): every block decref'd, the table empty, length 0."""
        self._call(["free", self.index(seq)], seq.free)

    def reserve(self, seq, n):
        """seq.reserve(n): copy-on-write first (a shared, partly filled last block), then new blocks."""
        self._call(["reserve", self.index(seq), n], seq.reserve, n)

    def grow(self, seq, n):
        """What a step of n tokens stores, done by the test (see the module's docstring)."""
        seed = 100 + len(self.records)      # the test's K/V for these positions (support.Stored draws the same)
        self._call(["grow", self.index(seq), n, seed], sc.grow, self.pool, seq, n, seed)

    def step(self, seqs, chunks):
        """paged_step(params, cfg, seqs, chunks) (Part 2's code, on shared blocks)."""
        self.stepped = True
        self._call(["step", [self.index(s) for s in seqs], [list(c) for c in chunks]], self.pk.paged_step,
                   self.params, self.cfg, list(seqs), [list(c) for c in chunks])

    # --------------------------------------------------------------------------- what it checks
    def copies_by_call(self):
        """How many copies each call made so far, seen in the tables (a last block replaced)."""
        return rules.copies_made(self.records, self.B)

    def tables(self):
        return self.records[-1]["tables"]

    def refcount(self, b):
        return rules.free_as_zero(self.records[-1]["refcounts"])[b]

    def same_as_without_sharing(self):
        """Every logit and every stored K/V equal those of the same calls where each fork is a new
        sequence that prefills its parent's tokens (your own paged_step, on a pool of its own)."""
        if not support.part2_works(self.pk):
            pytest.skip(support.needs_part2(self.pk, "the comparison with the same script without sharing"))
        ops = [r["op"] for r in self.records]
        scenario, inputs = sc.sharing_twin(n_blocks=self.n_blocks, block_size=self.B, actions=ops)
        twin = rules.unshared_records(ops, sc.SCENARIOS[scenario](self.pk, **inputs))
        for i, (rec, alone) in enumerate(zip(self.records, twin)):
            where = self._at(i)
            if alone["error"] is not None:
                fail(f"{where}: without sharing, the same calls raised {support.error_text(alone['error'])}")
            for j, (e, g) in enumerate(zip(alone["result"] or (), rec["result"] or ())):
                support.close(f"{where}: logits of seq {rec['op'][1][j]} with sharing vs the same calls where every "
                              "fork is a new sequence that prefills its parent's tokens", e, g, support.TOL_LOGITS,
                              SECTION)
            for s, (e, g) in enumerate(zip(alone["kv"], rec["kv"])):
                why = rules.kv_difference(e, g)
                if why:
                    fail(f"{where}: seq {s}'s K/V with sharing differ from the same calls without sharing: {why}\n"
                         f"{support.picture(rec, self.B)}" + self._copy_note())

    # ------------------------------------------------------------------------------- recording
    def _call(self, op, fn, *args):
        """fn(*args), which must succeed; then the rules of sharing on what it did, and the K/V."""
        try:
            result = fn(*args)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001  (any error of your code is the failure)
            if op[0] == "step" and not support.part2_works(self.pk):
                pytest.skip(support.needs_part2(self.pk, "the rest of this test"))
            fail(f"after call {len(self.records) + 1}, {explain.describe_action(op)}: expected it to succeed, but it "
                 f"raised {type(e).__name__}: {str(e)[:300]}")
        self.records.append({"op": op, "result": [sc.as_array(o) for o in result] if op[0] == "step" else None,
                             "error": None, "kv": [sc.gathered_kv(s) for s in self.seqs], **sc.seq_state(self.seqs),
                             "refcounts": sc.refcounts(self.pool, self.n_blocks)})
        broken = rules.sharing_violation(self.records, self.B)
        if broken:       # said as "after action n of n, ...": here each call is checked as it is made
            n = len(self.records)
            fail(broken.replace(f"after action {n} of {n}, ", f"after call {n}, ", 1) + self._copy_note())
        self.stored.apply(op)
        for s, got in enumerate(self.records[-1]["kv"]):
            why = None if self.stepped else rules.kv_difference(self.stored.kv(s), got)
            if why:
                fail(f"{self._at(len(self.records) - 1)}: seq {s}'s K/V read from pool storage "
                     f"through its table differ from what the test stored: {why}\n"
                     f"{support.picture(self.records[-1], self.B)}" + self._copy_note())
        return result

    def _add(self, seq):
        self.seqs.append(seq)
        return seq

    def _copy_note(self):
        note = rules.copy_note(sc.copy_runs(self.pk, self.cfg))
        return f"\n  {note}" if note else ""

    def _at(self, i):
        return f"after call {i + 1}, {explain.describe_action(self.records[i]['op'])}"

    def index(self, seq):
        return next(i for i, s in enumerate(self.seqs) if s is seq)
