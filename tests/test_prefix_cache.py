"""Part 5 (bonus): shared prefix across requests (PrefixCache, cached_prefill).

Each test is a story on one PrefixCache (prefix_bench.PrefixBench): requests prefilled through the
cache, sequences the test builds itself, and the cache's own calls. Blocks are named by what they
were made for, "1.2" = logical block 2 of sequence 1, so which ids your allocator hands out (Part 1)
does not matter here. A file without PrefixCache and cached_prefill skips these tests: the bonus is
extra credit."""
import pytest

from prefix_bench import FREED, NEGATIVE, PAST_END, PrefixBench, block_of, check
from support import bonus_attempted, tokens

pytestmark = pytest.mark.prefix_cache


@pytest.fixture(autouse=True)
def _bonus(pk):
    bonus_attempted(pk, "prefix_cache")


A = tokens(13, 50)                    # 3 full blocks and 1 token
P, Q, R, R2, X, Y, Z = (tokens(4, 70 + i) for i in range(7))
X[0] = (P[0] + 1) % 256               # X starts differently from P
T1 = [9]                              # one more token, so a lookup is not capped


def test_the_first_request_caches_its_full_blocks(pk):
    bench = PrefixBench(pk)
    check("request 0: hits and tokens computed (13 tokens, nothing cached yet: all computed)",
          {"hits": [], "computed": 13}, bench.request(A))
    check("blocks the cache holds after request 0 (its 3 full blocks; the 4th, partly filled, is not cached)",
          ["0.0", "0.1", "0.2"], bench.cached())
    check("n_cached, n_hit_tokens", (3, 0), bench.counters())
    bench.release(0)
    check("blocks the cache holds after the test gave request 0's blocks back (the cache's own reference)",
          ["0.0", "0.1", "0.2"], bench.cached())


def test_a_second_request_reuses_the_shared_prefix(pk):
    """Request 1 = A's first 8 tokens + 5 of its own: blocks 0 and 1 hit; its block 2 (A's 8 tokens and
    4 of its own) is a new key, cached from request 1's table."""
    bench = PrefixBench(pk, twin=True)
    bench.request(A)
    check("request 1: hits and tokens computed", {"hits": ["0.0", "0.1"], "computed": 5},
          bench.request(A[:8] + tokens(5, 51)))
    check("n_hit_tokens", 8, bench.counters()[1])
    check("blocks the cache holds", ["0.0", "0.1", "0.2", "1.2"], bench.cached())


@pytest.mark.parametrize("n, hits", [(0, []), (1, []), (4, []), (5, ["0.0"]), (8, ["0.0"]), (9, ["0.0", "0.1"]),
                                     (12, ["0.0", "0.1"]), (13, ["0.0", "0.1", "0.2"]), (20, ["0.0", "0.1", "0.2"])])
def test_lookup_leaves_at_least_one_token(pk, n, hits):
    """A 12-token prompt was cached whole (3 blocks of 4); lookup of its first n tokens (and more) returns
    at most (n - 1) // 4 blocks, so at least one token is left to compute."""
    prompt = tokens(20, 54)
    bench = PrefixBench(pk)
    bench.insert(bench.sequence(prompt[:12]))
    check(f"lookup of {n} tokens", hits, bench.lookup(prompt[:n]))


def test_a_prompt_cached_whole_recomputes_its_last_block(pk):
    prompt = tokens(12, 55)
    bench = PrefixBench(pk, twin=True)
    bench.request(prompt)
    check("request 1 (the same 12 tokens): hits and tokens computed (block 2 is recomputed, into a block of its own)",
          {"hits": ["0.0", "0.1"], "computed": 4}, bench.request(prompt))
    check("blocks the cache holds (block 2's key is cached already: request 1's copy is not)",
          ["0.0", "0.1", "0.2"], bench.cached())


def test_the_same_block_after_another_prefix_never_matches(pk):
    """A key is the whole prefix a block ends: X Q R shares Q and R with P Q R, but not their keys."""
    bench = PrefixBench(pk)
    check("insert(P Q R t): blocks newly cached", 3, bench.insert(bench.sequence(P + Q + R + T1)))
    check("lookup(X Q R t) (block 0 differs)", [], bench.lookup(X + Q + R + T1))
    check("lookup(P Q R t)", ["0.0", "0.1", "0.2"], bench.lookup(P + Q + R + T1))
    check("insert(X Q R): blocks newly cached (all three keys are new)", 3, bench.insert(bench.sequence(X + Q + R)))
    check("lookup(X Q R t)", ["1.0", "1.1", "1.2"], bench.lookup(X + Q + R + T1))


def test_insert_caches_new_keys_only(pk):
    """Keys already cached keep their block (seq 1's blocks are not taken); a chain can run across two
    sequences' blocks; a block that caches one key is not cached under another."""
    bench = PrefixBench(pk)
    pqr = bench.sequence(P + Q + R)
    check("insert(P Q R)", 3, bench.insert(pqr))
    check("insert(P Q) of another sequence: its keys are cached already", 0, bench.insert(bench.sequence(P + Q)))
    check("blocks the cache holds after it", ["0.0", "0.1", "0.2"], bench.cached())
    check("insert(P Q R2): only block 2's key is new", 1, bench.insert(bench.sequence(P + Q + R2)))
    check("lookup(P Q R2 t): one chain over two sequences' blocks", ["0.0", "0.1", "2.2"], bench.lookup(P + Q + R2 + T1))
    yz = bench.sequence(Y + Z)
    check("insert(Y Z, [seq 0's block 0, seq 3's block 1]): seq 0's block 0 caches P already", 1,
          bench.insert(yz, 8, [block_of(pqr, 0), 1]))
    check("lookup(Y Z t): Y is not cached, so nothing", [], bench.lookup(Y + Z + T1))
    check("insert(Y Z, seq 3's own table)", 1, bench.insert(yz))
    check("lookup(Y Z t)", ["3.0", "3.1"], bench.lookup(Y + Z + T1))
    check("insert(P Q R) again, and insert of 3 tokens (no full block)", [0, 0],
          [bench.insert(pqr), bench.insert(pqr, 3, [])])
    check("n_cached", 6, bench.counters()[0])


def test_insert_looks_only_at_the_full_blocks_of_its_tokens(pk):
    """A table longer than the full blocks of the tokens given (here seq 0's 3 blocks for its first 9
    or 8 tokens) is fine: only blocks[:len(tokens) // B] matter, and the block after them, partly
    filled as far as these tokens go, is never cached."""
    bench = PrefixBench(pk)
    s = bench.sequence(P + Q + R)
    check("insert(9 tokens: 2 full blocks, a table of 3): blocks newly cached", 2, bench.insert(s, 9, [0, 1, 2]))
    check("blocks the cache holds after it (block 2 holds 1 of these 9 tokens: not cached)", ["0.0", "0.1"],
          bench.cached())
    check("insert(8 tokens, the same table of 3): both keys are cached already", (0, ["0.0", "0.1"]),
          (bench.insert(s, 8, [0, 1, 2]), bench.cached()))
    check("lookup(P Q R t): block 2's key was never cached", ["0.0", "0.1"], bench.lookup(P + Q + R + T1))
    check("insert of all 12 tokens: only block 2's key is new", 1, bench.insert(s))


def test_a_key_cached_already_keeps_its_block_and_counts_it_as_used(pk):
    """seq 2 holds its own copy of seq 0's P Q R. Its insert caches nothing (the keys keep seq 0's
    blocks), but counts those cached blocks as used, deepest first: least recently used first, 0.2 0.1
    0.0 1.1 1.0 becomes 1.1 1.0 0.2 0.1 0.0. seq 2's own blocks are not cached: they go free with it."""
    bench = PrefixBench(pk)
    seqs = []
    for prompt in (P + Q + R, X + Q):
        seqs.append(bench.sequence(prompt))
        bench.insert(seqs[-1])
    seqs.append(bench.sequence(P + Q + R))
    check("insert of seq 2 (P Q R, all three keys cached from seq 0): blocks newly cached, blocks the cache holds",
          (0, ["0.0", "0.1", "0.2", "1.0", "1.1"]), (bench.insert(seqs[2]), bench.cached()))
    check("lookup(P Q R t): the blocks cached first", ["0.0", "0.1", "0.2"], bench.lookup(P + Q + R + T1))
    for s in seqs:
        bench.release(s)
    check("blocks released by evict(1), one call at a time (seq 2's insert counted 0.2, 0.1, 0.0 as used)",
          [["1.1"], ["1.0"], ["0.2"], ["0.1"], ["0.0"], []], bench.evict_one_at_a_time(6))


def test_a_key_left_uncached_counts_nothing(pk):
    """insert(Y Z, [seq 0's block 0, seq 2's block 1]): seq 0's block 0 caches P already, so key Y stays
    uncached and counts nothing at the recency step; seq 0's block 0 keeps its place. Least recently
    used first: 0.1 0.0 1.0, then 2.1 (cached under Y Z): 0.1 0.0 1.0 2.1."""
    bench = PrefixBench(pk)
    seqs = []
    for prompt in (P + Q, X):
        seqs.append(bench.sequence(prompt))
        bench.insert(seqs[-1])
    seqs.append(bench.sequence(Y + Z))
    check("insert(Y Z, [seq 0's block 0, seq 2's block 1]): blocks newly cached, blocks the cache holds",
          (1, ["0.0", "0.1", "1.0", "2.1"]), (bench.insert(seqs[2], 8, [block_of(seqs[0], 0), 1]), bench.cached()))
    for s in seqs:
        bench.release(s)
    check("blocks released by evict(1), one call at a time (key Y was not cached: seq 0's block 0 was not used)",
          [["0.1"], ["0.0"], ["1.0"], ["2.1"], []], bench.evict_one_at_a_time(5))


def two_cached_sequences(pk):
    """seq 0 = A (3 full blocks) inserted: least recently used first, 0.2 0.1 0.0 (a use counts the
    deepest block first, so block 0 ends newest). seq 1 = A's 8 tokens + 4 of its own inserted: its use
    counts 1.2 (new), 0.1, 0.0: order 0.2 1.2 0.1 0.0. Both given back: only the cache holds them."""
    bench = PrefixBench(pk)
    for prompt in (A, A[:8] + tokens(4, 56)):
        bench.insert(bench.sequence(prompt))
    bench.release(0)
    bench.release(1)
    return bench


def test_lookup_changes_nothing(pk):
    bench = two_cached_sequences(pk)
    for prompt in (A, A[:9], A[:8] + tokens(5, 56)):
        bench.lookup(prompt)
    check("blocks the cache holds, n_cached and n_hit_tokens after three lookups (lookup changes nothing)",
          (["0.0", "0.1", "0.2", "1.2"], (4, 0)), (bench.cached(), bench.counters()))
    check("blocks released by evict(1), one call at a time (lookup changes no recency either)",
          [["0.2"], ["1.2"], ["0.1"], ["0.0"], []], bench.evict_one_at_a_time(5))
    check("what evict(1) returned, each time", [1, 1, 1, 1, 0], bench.returned(5))


def test_eviction_is_least_recently_used_first_and_a_chain_loses_its_tail_first(pk):
    """After two_cached_sequences (0.2 1.2 0.1 0.0), seq 2 = A's first 4 tokens + 5 of its own is
    inserted: 2.1 is new, then its use counts 2.1, 0.0: order 0.2 1.2 0.1 2.1 0.0."""
    bench = two_cached_sequences(pk)
    s = bench.sequence(A[:4] + tokens(5, 57))
    check("insert of seq 2", 1, bench.insert(s))
    bench.release(s)
    check("blocks released by evict(1), one call at a time", [["0.2"], ["1.2"], ["0.1"], ["2.1"], ["0.0"], []],
          bench.evict_one_at_a_time(6))


def test_evict_skips_blocks_a_sequence_holds(pk):
    bench = PrefixBench(pk)
    a = bench.sequence(A)
    bench.insert(a)
    check("evict(10) while seq 0 holds every cached block", 0, bench.evict(10))
    pqr = bench.sequence(P + Q + R)
    bench.insert(pqr)
    bench.release(pqr)
    check("evict(0)", 0, bench.evict(0))
    check("evict(10) with seq 1 given back: only its 3 blocks go", (3, ["0.0", "0.1", "0.2"]),
          (bench.evict(10), bench.cached()))
    bench.release(a)
    check("evict(2), then evict(10), after seq 0 was given back", [2, 1], [bench.evict(2), bench.evict(10)])
    check("blocks the cache holds at the end, n_cached", ([], 0), (bench.cached(), bench.counters()[0]))


def test_no_cascade_when_a_parent_is_evicted(pk):
    """seq 1 = P Q R holds its blocks; only 1.2 (key P Q R) is new when it is inserted. Evicting P's and
    P Q's blocks leaves 1.2 cached but unreachable, until P and P Q are cached again."""
    bench = PrefixBench(pk)
    pq = bench.sequence(P + Q)
    bench.insert(pq)
    bench.insert(bench.sequence(P + Q + R))
    bench.release(pq)
    check("evict(5): 0.0 and 0.1 go, 1.2 is held by seq 1", (2, ["1.2"]), (bench.evict(5), bench.cached()))
    check("lookup(P Q R t): P is no longer cached", [], bench.lookup(P + Q + R + T1))
    bench.insert(bench.sequence(P + Q))
    check("lookup(P Q R t) after P and P Q are cached again", ["2.0", "2.1", "1.2"], bench.lookup(P + Q + R + T1))


def three_free_blocks(pk, twin=False):
    """Request 0 (13 tokens) leaves 0.0 0.1 0.2 cached (0.2 the least recently used); then the test
    takes blocks of a 10-block pool until the pool says 3 are free."""
    bench = PrefixBench(pk, n_blocks=10, twin=twin)
    bench.request(A)
    bench.release(0)
    bench.hold_until_free(3)
    return bench


@pytest.mark.parametrize("L, left", [(15, ["0.1", "0.2"]), (17, ["0.1"]), (21, [])])
def test_cached_prefill_evicts_only_the_shortfall(pk, L, left):
    """Request 1 = A's first 4 tokens + L - 4 of its own: it hits 0.0 and needs ceil(L / 4) - 1 new
    blocks; 3 are free, the rest is evicted, least recently used first, never the hit."""
    bench = three_free_blocks(pk, twin=True)
    check(f"request 1 ({L} tokens): hits and tokens computed", {"hits": ["0.0"], "computed": L - 4},
          bench.request(A[:4] + tokens(L - 4, 63)))
    check("blocks the cache holds after it (what is left of request 0's, then request 1's full blocks)",
          ["0.0"] + left + [f"1.{i}" for i in range(1, L // 4)], bench.cached())


def test_a_hit_is_never_evicted_even_the_oldest(pk):
    """Request 0 (A) then request 1 (another prompt) leave, least recently used first, 0.2 0.1 0.0 1.1
    1.0. Request 2 hits 0.0 and is 3 blocks short: it evicts 0.2, 0.1 and 1.1, not its hit 0.0."""
    bench = PrefixBench(pk, n_blocks=14, twin=True)
    bench.request(A)
    bench.request(tokens(9, 65))
    bench.release(0)
    bench.release(1)
    bench.hold_until_free(2)
    check("request 2: hits and tokens computed", {"hits": ["0.0"], "computed": 17}, bench.request(A[:4] + tokens(17, 66)))
    check("blocks the cache holds after it", ["0.0", "1.0", "2.1", "2.2", "2.3", "2.4"], bench.cached())


@pytest.mark.parametrize("L", [25, 27])
def test_cached_prefill_that_cannot_fit_changes_nothing(pk, L):
    """Request 1 needs ceil(L / 4) - 1 = 6 blocks: 3 free + 2 evictable (0.1, 0.2) = 5; evicting the hit
    0.0 would make 6, but a hit is never evicted: MemoryError, and no eviction either."""
    bench = three_free_blocks(pk)
    bench.request(A[:4] + tokens(L - 4, 64), raises="MemoryError")
    check("blocks released by evict(1), one at a time, after the failed prefill (recency unchanged)",
          [["0.2"], ["0.1"], ["0.0"]], bench.evict_one_at_a_time(3))


BAD = {
    "cached_prefill on a sequence of length 1": lambda b: b.bad_prefill("filled", A[:6], raises="ValueError"),
    "cached_prefill on a sequence with a block and length 0":
        lambda b: b.bad_prefill("reserved", A[:6], raises="ValueError"),
    "cached_prefill on a sequence of another pool": lambda b: b.bad_prefill("other_pool", A[:6], raises="ValueError"),
    "a token id past vocab after a cached block": lambda b: b.request(A[:4] + [256 + 44], raises="ValueError"),
    "an empty prompt": lambda b: b.request([], raises="ValueError"),
    "insert with a table too short (13 tokens: 3 full blocks)": lambda b: b.insert(1, 13, [0, 1], raises="ValueError"),
    "insert with a free block after a new one": lambda b: b.insert(1, 13, [0, 1, FREED], raises="ValueError"),
    "insert with id n_blocks": lambda b: b.insert(1, 13, [0, 1, PAST_END], raises="ValueError"),
    "insert with id -1": lambda b: b.insert(1, 13, [0, NEGATIVE, 2], raises="ValueError"),
    "evict(-1)": lambda b: b.evict(-1, raises="ValueError"),
}


@pytest.mark.parametrize("case, full", [(c, f) for c in BAD for f in (False, True) if not (f and "free block" in c)],
                         ids=lambda x: {False: "", True: "on a full pool"}.get(x, x) if isinstance(x, bool) else x)
def test_bad_calls_are_value_errors_that_change_nothing(pk, case, full):
    """Request 0 (seq 0) caches A's first block, the test holds a block of its own, and seq 1 is A
    (13 tokens) in blocks the test made: its block 0's key is cached, 1 and 2 are new. On a full pool
    (the test took every free block), the ValueError still comes first (a free block to insert exists
    only on a pool that is not full). The bench checks the call raised ValueError and changed nothing."""
    bench = PrefixBench(pk, n_blocks=10)
    bench.request(A[:6])
    bench.hold(1)
    bench.sequence(A, seed=3)
    if full:
        bench.hold_until_free(0)
    BAD[case](bench)


def test_cached_logits_equal_your_own_prefill_without_the_cache(pk):
    """Requests 1-3 hit request 0's blocks. The test overwrites the K/V of 0.0 and 0.1 (only the cache
    holds them) before request 3: a true hit reads what the test put there, so request 3's logits must
    equal your prefill of the same prompt without the cache, with the same K/V overwritten (the bench
    compares them)."""
    S = tokens(10, 60)
    bench = PrefixBench(pk, twin=True)
    for tail in ([1, 2], [3, 4, 5, 6, 7], [1, 2, 8, 9, 10, 11]):
        bench.request(S + tail)
    bench.release(0)
    bench.release(1)
    bench.overwrite(0, 0, 7)
    bench.overwrite(0, 1, 8)
    check("request 3: hits and tokens computed", {"hits": ["0.0", "0.1"], "computed": 3}, bench.request(S + [5]))
