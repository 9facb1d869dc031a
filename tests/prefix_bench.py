"""Part 5's test bench: one PrefixCache on a pool of your BlockPool, called the way a test reads it.

Each call runs on your code and returns what it returned, with every block named by what it was
made for: "1.2" = logical block 2 of sequence 1 (requests and the test's own sequences are numbered
in the order they appear), so which ids your allocator hands out (Part 1) does not matter. The
blocks the cache holds are those whose refcount is one more than the tables and the test holding
them (the cache's own reference). After every call the bench checks what every Part 5 call must
do (PrefixBench.problem): a call given `raises` raises that and changes nothing, any other succeeds,
the cache holds exactly one reference on each block it caches, and with twin=True each request's
logits equal your own prefill of the same prompt without the cache. The calls run one at a time on
a scenarios.PrefixRun, what scenarios.prefix_script (the script the grader replays) runs too.

`sequence(tokens)` is a sequence built without paged_step: the test takes its blocks with
pool.alloc and stores their K/V itself. `release(s)` gives a sequence's blocks back with
pool.decref only (no free()), so that afterwards only the cache holds them.
"""
import explain
import rules
import scenarios as sc
import support

SECTION = "Part 5 (bonus): shared prefix across requests"
FREED, PAST_END, NEGATIVE = "freed", "past", "neg"   # insert table entries: a free block, id n_blocks, id -1


def block_of(s, k):
    """For an insert's table: the block that was sequence s's logical block k when s was made."""
    return [s, k]


class PrefixBench:
    def __init__(self, pk, block_size=4, n_blocks=32, twin=False):
        waits = support.needs_part1(pk, "this test of the cache") or support.needs_exact_copies(pk, "this test of the cache")
        if waits:
            support.wait(waits)
        self.pk, self.B, self.n_blocks, self.twin = pk, block_size, n_blocks, twin
        self.run = sc.PrefixRun(pk, n_blocks=n_blocks, block_size=block_size, twin=twin)
        self.reader, self.view, self.n_seqs = rules.Part5Reader(block_size), [], 0

    def _call(self, call, raises=None):
        """Run one call and judge its record (problem). A request prefills with paged_step: while Part 2
        does not work, the calls before the first request are checked and the rest of the test is
        skipped, with the reason (a stub still fails the test: "not implemented yet")."""
        rec = self.run.call(call)
        if call[0] == "request" and not support.part2_works(self.pk):
            support.wait(support.needs_part2(self.pk, "the rest of this test (cached_prefill computes with paged_step)"))
        try:
            self.view.append(self.reader.row(rec))
        except (KeyError, TypeError, ValueError) as e:
            support.fail(f"the cache's state could not be read: {e} (are refcount(), n_cached and n_hit_tokens "
                         "integers?)", SECTION)
        why = self.problem(rec, self.view[-1], raises)
        if why:
            n, ops = len(self.run.records), [r["op"] for r in self.run.records]
            support.fail(f"after action {n} of {n}, {explain.describe_prefix_actions(ops)[-1]}: {why}", SECTION)
        return self.view[-1]["result"]

    def problem(self, rec, row, raises):
        """What every Part 5 call must do, on its record and its row of rules.part5_view (a sentence, or
        None): a call given `raises` (an error's kind) raises that and changes nothing (tables,
        refcounts, n_cached, n_hit_tokens), any other succeeds; the cache holds one reference on each
        block it caches and none on others; with twin=True a request's logits equal your own prefill of
        the same prompt without the cache."""
        got = "no error" if rec["error"] is None else support.error_text(rec["error"])
        if raises and row["error"] != raises:
            return f"expected {raises}, got {got}"
        if not raises and rec["error"] is not None:
            return f"expected it to succeed, but it raised {got}"
        if raises and not row.get("unchanged", True):
            return (f"a call that raised {raises} must change nothing, but the tables, refcounts, n_cached or "
                    "n_hit_tokens changed")
        if row["bad_references"]:
            b, r = row["bad_references"][0]
            return (f"block {b}'s refcount is {r} more than the tables and the test holding it: the cache must hold "
                    "exactly one reference (one pool.incref) on each block it caches, none on others")
        if self.twin and rec["op"][0] == "request" and rec["error"] is None:
            why = rules.twin_difference(rec, self._twin(self.run.twins[-1]))
            if why:
                return (f"its logits differ from your own prefill of the same prompt without the cache (a pool of "
                        f"its own, the hit blocks' tokens first, then the rest): {why}")
        return None

    def _twin(self, plan):
        """A request's twin (scenarios.prefix_twin), run here on your implementation: the same prompt
        prefilled without the cache."""
        if plan is None:
            return None
        scenario, inputs = sc.prefix_twin(None, 0, self.n_blocks, self.B, plan["chain"], plan["pokes"])
        return rules.step_twin(sc.SCENARIOS[scenario](self.pk, **inputs))

    def _new_seq(self):
        self.n_seqs += 1
        return self.n_seqs - 1

    # ------------------------------------------------------------------ calls
    def request(self, tokens, raises=None):
        """A new PagedSequence, cache.lookup(tokens), cached_prefill: {"hits": the lookup's blocks,
        "computed": the tokens not taken from the cache}."""
        self._new_seq()
        return self._call(["request", list(tokens)], raises)

    def sequence(self, tokens, seed=None):
        """A sequence the test builds itself (no paged_step); returns its number."""
        s = self._new_seq()
        self._call(["seq", list(tokens), s + 1 if seed is None else seed])
        return s

    def insert(self, s, n_tokens=None, table=None, raises=None):
        """cache.insert(s's first n_tokens tokens, table) (default: all of s's tokens, s's table);
        table entries: k = s's k-th block, block_of(t, k), FREED, PAST_END, NEGATIVE."""
        call = ["insert", s] if n_tokens is None and table is None else ["insert", s, n_tokens, table]
        return self._call(call, raises)

    def lookup(self, tokens):
        return self._call(["lookup", list(tokens)])

    def evict(self, n, raises=None):
        return self._call(["evict", n], raises)

    def release(self, s):
        self._call(["release", s])

    def overwrite(self, s, k, seed):
        """The test overwrites the K/V of the block that was s's logical block k, in every layer."""
        self._call(["overwrite", s, k, seed])

    def hold(self, n):
        """The test takes n blocks of its own."""
        self._call(["hold", n])

    def hold_until_free(self, k):
        """The test takes blocks until the pool says n_free == k."""
        self._call(["hold_until", k])

    def bad_prefill(self, kind, tokens, raises):
        """cached_prefill on a sequence it must refuse (scenarios.prefix_script's "bad_prefill")."""
        return self._call(["bad_prefill", kind, list(tokens)], raises)

    # ------------------------------------------------------------------ what the test reads
    def cached(self):
        """The names of the blocks the cache holds now."""
        return self.view[-1]["cached"]

    def counters(self):
        """(n_cached, n_hit_tokens)."""
        return self.view[-1]["n_cached"], self.view[-1]["n_hit_tokens"]

    def returned(self, n):
        """What the last n calls returned."""
        return [row["result"] for row in self.view[-n:]]

    def evict_one_at_a_time(self, times):
        """evict(1) `times` times: the names that left the cache at each call."""
        left = []
        for _ in range(times):
            before = set(self.cached())
            self.evict(1)
            left.append(sorted(before - set(self.cached())))
        return left


def check(what, expected, got):
    support.equal(what, expected, got, SECTION)
