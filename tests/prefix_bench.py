"""Part 5's test bench: one PrefixCache on a pool of your BlockPool, called the way a test reads it.

Each call runs on your code and returns what it returned, with every block named by what it was
made for: "1.2" = logical block 2 of sequence 1 (requests and the test's own sequences are numbered
in the order they appear), so which ids your allocator hands out (Part 1) does not matter. The
blocks the cache holds are those whose refcount is one more than the tables and the test holding
them (the cache's own reference). After every call the bench checks what every Part 5 call must
do (support.run_prefix): a call given `raises` raises that and changes nothing, any other succeeds,
the cache holds exactly one reference on each block it caches, and with twin=True each request's
logits equal your own prefill of the same prompt without the cache. It does so by replaying the
calls so far through scenarios.prefix_script, the script the grader replays too.

`sequence(tokens)` is a sequence built without paged_step: the test takes its blocks with
pool.alloc and stores their K/V itself. `release(s)` gives a sequence's blocks back with
pool.decref only (no free()), so that afterwards only the cache holds them.
"""
import support

SECTION = "Part 5 (bonus): shared prefix across requests"
FREED, PAST_END, NEGATIVE = "freed", "past", "neg"   # insert table entries: a free block, id n_blocks, id -1


def block_of(s, k):
    """For an insert's table: the block that was sequence s's logical block k when s was made."""
    return [s, k]


class PrefixBench:
    def __init__(self, pk, block_size=4, n_blocks=32, twin=False):
        self.pk, self.B, self.n_blocks, self.twin = pk, block_size, n_blocks, twin
        self.calls, self.raises, self.view, self.n_seqs = [], {}, [], 0

    def _call(self, call, raises=None):
        if raises:
            self.raises[len(self.calls)] = raises
        self.calls.append(call)
        self.view = support.run_prefix(self.pk, self.calls, self.B, self.n_blocks, SECTION, self.raises, self.twin)
        return self.view[-1]["result"]

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
