"""Part 5 (bonus): shared prefix across requests (PrefixCache, cached_prefill).

Every script runs through scenarios.prefix_script and is read the way the grader reads it
(rules.part5_view): a block is named by what it was made for, "1.2" = logical block 2 of sequence
1 (requests and the test's own sequences are numbered in the order they appear), so which ids your
allocator hands out (Part 1) does not matter here. The blocks the cache holds are the blocks whose
refcount is one more than the tables and the test holding them: the cache's own reference. Many
scripts build sequences without paged_step: the test takes their blocks with pool.alloc and stores
their K/V itself, then calls cache.insert. A file without PrefixCache and cached_prefill skips
these tests: the bonus is extra credit."""
import pytest

from support import bonus_attempted, run_prefix, tokens

pytestmark = pytest.mark.prefix_cache
SECTION = "Part 5 (bonus): shared prefix across requests"
B = 4


@pytest.fixture(autouse=True)
def _bonus(pk):
    bonus_attempted(pk)


def check(what, expected, got):
    from support import equal
    equal(what, expected, got, SECTION)


A = tokens(13, 50)                    # 3 full blocks and 1 token
P, Q, R, R2, X, Y, Z = (tokens(4, 70 + i) for i in range(7))
X[0] = (P[0] + 1) % 256               # X starts differently from P
T1 = [9]                              # one more token, so a lookup is not capped


def test_the_first_request_caches_its_full_blocks(pk):
    view = run_prefix(pk, [["request", A], ["release", 0]], B, section=SECTION)
    check("request 0: hits and tokens computed (13 tokens, nothing cached yet: all computed)",
          {"hits": [], "computed": 13}, view[0]["result"])
    check("blocks the cache holds after request 0 (its 3 full blocks; the 4th, partly filled, is not cached)",
          ["0.0", "0.1", "0.2"], view[0]["cached"])
    check("n_cached, n_hit_tokens", (3, 0), (view[0]["n_cached"], view[0]["n_hit_tokens"]))
    check("blocks the cache holds after the test gave request 0's blocks back (the cache's own reference)",
          ["0.0", "0.1", "0.2"], view[1]["cached"])


def test_a_second_request_reuses_the_shared_prefix(pk):
    """B = A's first 8 tokens + 5 of its own: blocks 0 and 1 hit; its block 2 (A's 8 tokens and 4 of
    its own) is a new key, cached from B's table."""
    view = run_prefix(pk, [["request", A], ["request", A[:8] + tokens(5, 51)]], B, section=SECTION, twin=True)
    check("request 1: hits and tokens computed", {"hits": ["0.0", "0.1"], "computed": 5}, view[1]["result"])
    check("n_hit_tokens", 8, view[1]["n_hit_tokens"])
    check("blocks the cache holds", ["0.0", "0.1", "0.2", "1.2"], view[1]["cached"])


@pytest.mark.parametrize("n, hits", [(0, []), (1, []), (4, []), (5, ["0.0"]), (8, ["0.0"]), (9, ["0.0", "0.1"]),
                                     (12, ["0.0", "0.1"]), (13, ["0.0", "0.1", "0.2"]), (20, ["0.0", "0.1", "0.2"])])
def test_lookup_leaves_at_least_one_token(pk, n, hits):
    """A 12-token prompt was cached whole (3 blocks of 4); lookup of its first n tokens (and more) returns
    at most (n - 1) // 4 blocks, so at least one token is left to compute."""
    prompt = tokens(20, 54)
    view = run_prefix(pk, [["seq", prompt[:12], 1], ["insert", 0], ["lookup", prompt[:n]]], B, section=SECTION)
    check(f"lookup of {n} tokens", hits, view[2]["result"])


def test_a_prompt_cached_whole_recomputes_its_last_block(pk):
    prompt = tokens(12, 55)
    view = run_prefix(pk, [["request", prompt], ["request", prompt]], B, section=SECTION, twin=True)
    check("request 1 (the same 12 tokens): hits and tokens computed (block 2 is recomputed, into a block of its own)",
          {"hits": ["0.0", "0.1"], "computed": 4}, view[1]["result"])
    check("blocks the cache holds (block 2's key is cached already: request 1's copy is not)",
          ["0.0", "0.1", "0.2"], view[1]["cached"])


def test_the_same_block_after_another_prefix_never_matches(pk):
    """A key is the whole prefix a block ends: X Q R shares Q and R with P Q R, but not their keys."""
    actions = [["seq", P + Q + R + T1, 1], ["insert", 0], ["lookup", X + Q + R + T1], ["lookup", P + Q + R + T1],
               ["seq", X + Q + R, 2], ["insert", 1], ["lookup", X + Q + R + T1]]
    view = run_prefix(pk, actions, B, section=SECTION)
    check("insert(P Q R t): blocks newly cached", 3, view[1]["result"])
    check("lookup(X Q R t) (block 0 differs)", [], view[2]["result"])
    check("lookup(P Q R t)", ["0.0", "0.1", "0.2"], view[3]["result"])
    check("insert(X Q R): blocks newly cached (all three keys are new)", 3, view[5]["result"])
    check("lookup(X Q R t)", ["1.0", "1.1", "1.2"], view[6]["result"])


def test_insert_caches_new_keys_only(pk):
    """Keys already cached keep their block (seq 1's blocks are not taken); a chain can run across two
    sequences' blocks; a block that caches one key is not cached under another."""
    actions = [["seq", P + Q + R, 1], ["insert", 0], ["seq", P + Q, 2], ["insert", 1],
               ["seq", P + Q + R2, 3], ["insert", 2], ["lookup", P + Q + R2 + T1],
               ["seq", Y + Z, 4], ["insert", 3, 8, [[0, 0], 1]], ["lookup", Y + Z + T1],
               ["insert", 3], ["lookup", Y + Z + T1], ["insert", 0], ["insert", 0, 3, []]]
    view = run_prefix(pk, actions, B, section=SECTION)
    check("insert(P Q R)", 3, view[1]["result"])
    check("insert(P Q) of another sequence: its keys are cached already", 0, view[3]["result"])
    check("blocks the cache holds after it", ["0.0", "0.1", "0.2"], view[3]["cached"])
    check("insert(P Q R2): only block 2's key is new", 1, view[5]["result"])
    check("lookup(P Q R2 t): one chain over two sequences' blocks", ["0.0", "0.1", "2.2"], view[6]["result"])
    check("insert(Y Z, [seq 0's block 0, seq 3's block 1]): seq 0's block 0 caches P already", 1, view[8]["result"])
    check("lookup(Y Z t): Y is not cached, so nothing", [], view[9]["result"])
    check("insert(Y Z, seq 3's own table)", 1, view[10]["result"])
    check("lookup(Y Z t)", ["3.0", "3.1"], view[11]["result"])
    check("insert(P Q R) again, and insert of 3 tokens (no full block)", [0, 0],
          [view[12]["result"], view[13]["result"]])
    check("n_cached", 6, view[13]["n_cached"])


def test_insert_looks_only_at_the_full_blocks_of_its_tokens(pk):
    """A table longer than the full blocks of the tokens given (here seq 0's 3 blocks for its first 9
    or 8 tokens) is fine: only blocks[:len(tokens) // B] matter, and the block after them, partly
    filled as far as these tokens go, is never cached."""
    actions = [["seq", P + Q + R, 1], ["insert", 0, 9, [0, 1, 2]], ["insert", 0, 8, [0, 1, 2]],
               ["lookup", P + Q + R + T1], ["insert", 0]]
    view = run_prefix(pk, actions, B, section=SECTION)
    check("insert(9 tokens: 2 full blocks, a table of 3): blocks newly cached", 2, view[1]["result"])
    check("blocks the cache holds after it (block 2 holds 1 of these 9 tokens: not cached)", ["0.0", "0.1"],
          view[1]["cached"])
    check("insert(8 tokens, the same table of 3): both keys are cached already", (0, ["0.0", "0.1"]),
          (view[2]["result"], view[2]["cached"]))
    check("lookup(P Q R t): block 2's key was never cached", ["0.0", "0.1"], view[3]["result"])
    check("insert of all 12 tokens: only block 2's key is new", 1, view[4]["result"])


def test_a_key_cached_already_keeps_its_block_and_counts_it_as_used(pk):
    """seq 2 holds its own copy of seq 0's P Q R. Its insert caches nothing (the keys keep seq 0's
    blocks), but counts those cached blocks as used, deepest first: least recently used first, 0.2 0.1
    0.0 1.1 1.0 becomes 1.1 1.0 0.2 0.1 0.0. seq 2's own blocks are not cached: they go free with it."""
    actions = [["seq", P + Q + R, 1], ["insert", 0], ["seq", X + Q, 2], ["insert", 1], ["seq", P + Q + R, 3],
               ["insert", 2], ["lookup", P + Q + R + T1], ["release", 0], ["release", 1], ["release", 2]]
    view = run_prefix(pk, actions + [["evict", 1]] * 6, B, section=SECTION)
    check("insert of seq 2 (P Q R, all three keys cached from seq 0): blocks newly cached, blocks the cache holds",
          (0, ["0.0", "0.1", "0.2", "1.0", "1.1"]), (view[5]["result"], view[5]["cached"]))
    check("lookup(P Q R t): the blocks cached first", ["0.0", "0.1", "0.2"], view[6]["result"])
    check("blocks released by evict(1), one call at a time (seq 2's insert counted 0.2, 0.1, 0.0 as used)",
          [["1.1"], ["1.0"], ["0.2"], ["0.1"], ["0.0"], []], evicted_one_by_one(view, len(actions)))


def test_a_key_left_uncached_counts_nothing(pk):
    """insert(Y Z, [seq 0's block 0, seq 2's block 1]): seq 0's block 0 caches P already, so key Y stays
    uncached and counts nothing at the recency step; seq 0's block 0 keeps its place. Least recently
    used first: 0.1 0.0 1.0, then 2.1 (cached under Y Z): 0.1 0.0 1.0 2.1."""
    actions = [["seq", P + Q, 1], ["insert", 0], ["seq", X, 2], ["insert", 1], ["seq", Y + Z, 3],
               ["insert", 2, 8, [[0, 0], 1]], ["release", 0], ["release", 1], ["release", 2]]
    view = run_prefix(pk, actions + [["evict", 1]] * 5, B, section=SECTION)
    check("insert(Y Z, [seq 0's block 0, seq 2's block 1]): blocks newly cached, blocks the cache holds",
          (1, ["0.0", "0.1", "1.0", "2.1"]), (view[5]["result"], view[5]["cached"]))
    check("blocks released by evict(1), one call at a time (key Y was not cached: seq 0's block 0 was not used)",
          [["0.1"], ["0.0"], ["1.0"], ["2.1"], []], evicted_one_by_one(view, len(actions)))


def recency_setup():
    """seq 0 = A (3 full blocks) inserted: least recently used first, 0.2 0.1 0.0 (a use counts the
    deepest block first, so block 0 ends newest). seq 1 = A's 8 tokens + 4 of its own inserted: its use
    counts 1.2 (new), 0.1, 0.0: order 0.2 1.2 0.1 0.0. Both given back: only the cache holds them."""
    return [["seq", A, 1], ["insert", 0], ["seq", A[:8] + tokens(4, 56), 2], ["insert", 1], ["release", 0],
            ["release", 1]]


def evicted_one_by_one(view, start):
    """The name that leaves the cache at each evict(1) from `start` on."""
    return [sorted(set(view[i - 1]["cached"]) - set(view[i]["cached"])) for i in range(start, len(view))]


def test_lookup_changes_nothing(pk):
    lookups = [["lookup", A], ["lookup", A[:9]], ["lookup", A[:8] + tokens(5, 56)]]
    actions = recency_setup() + lookups + [["evict", 1]] * 5
    view = run_prefix(pk, actions, B, section=SECTION)
    check("blocks the cache holds, n_cached and n_hit_tokens after three lookups (lookup changes nothing)",
          (["0.0", "0.1", "0.2", "1.2"], 4, 0), (view[8]["cached"], view[8]["n_cached"], view[8]["n_hit_tokens"]))
    check("blocks released by evict(1), one call at a time (lookup changes no recency either)",
          [["0.2"], ["1.2"], ["0.1"], ["0.0"], []], evicted_one_by_one(view, 9))
    check("what evict(1) returned, each time", [1, 1, 1, 1, 0], [row["result"] for row in view[9:]])


def test_eviction_is_least_recently_used_first_and_a_chain_loses_its_tail_first(pk):
    """After recency_setup (0.2 1.2 0.1 0.0), seq 2 = A's first 4 tokens + 5 of its own is inserted: 2.1
    is new, then its use counts 2.1, 0.0: order 0.2 1.2 0.1 2.1 0.0."""
    actions = recency_setup() + [["seq", A[:4] + tokens(5, 57), 3], ["insert", 2], ["release", 2]] + [["evict", 1]] * 6
    view = run_prefix(pk, actions, B, section=SECTION)
    check("insert of seq 2", 1, view[7]["result"])
    check("blocks released by evict(1), one call at a time", [["0.2"], ["1.2"], ["0.1"], ["2.1"], ["0.0"], []],
          evicted_one_by_one(view, 9))


def test_evict_skips_blocks_a_sequence_holds(pk):
    actions = [["seq", A, 1], ["insert", 0], ["evict", 10], ["seq", P + Q + R, 2], ["insert", 1], ["release", 1],
               ["evict", 0], ["evict", 10], ["release", 0], ["evict", 2], ["evict", 10]]
    view = run_prefix(pk, actions, B, section=SECTION)
    check("evict(10) while seq 0 holds every cached block", 0, view[2]["result"])
    check("evict(0)", 0, view[6]["result"])
    check("evict(10) with seq 1 given back: only its 3 blocks go", (3, ["0.0", "0.1", "0.2"]),
          (view[7]["result"], view[7]["cached"]))
    check("evict(2), then evict(10), after seq 0 was given back", [2, 1], [view[9]["result"], view[10]["result"]])
    check("blocks the cache holds at the end, n_cached", ([], 0), (view[10]["cached"], view[10]["n_cached"]))


def test_no_cascade_when_a_parent_is_evicted(pk):
    """seq 1 = P Q R holds its blocks; only 1.2 (key P Q R) is new when it is inserted. Evicting P's and
    P Q's blocks leaves 1.2 cached but unreachable, until P and P Q are cached again."""
    actions = [["seq", P + Q, 1], ["insert", 0], ["seq", P + Q + R, 2], ["insert", 1], ["release", 0],
               ["evict", 5], ["lookup", P + Q + R + T1], ["seq", P + Q, 3], ["insert", 2], ["lookup", P + Q + R + T1]]
    view = run_prefix(pk, actions, B, section=SECTION)
    check("evict(5): 0.0 and 0.1 go, 1.2 is held by seq 1", (2, ["1.2"]), (view[5]["result"], view[5]["cached"]))
    check("lookup(P Q R t): P is no longer cached", [], view[6]["result"])
    check("lookup(P Q R t) after P and P Q are cached again", ["2.0", "2.1", "1.2"], view[9]["result"])


def exhaustion_setup():
    """Request 0 (13 tokens) leaves 0.0 0.1 0.2 cached (0.2 the least recently used); then the test
    takes blocks until the pool says 3 are free."""
    return [["request", A], ["release", 0], ["hold_until", 3]]


@pytest.mark.parametrize("L, left", [(15, ["0.1", "0.2"]), (17, ["0.1"]), (21, [])])
def test_cached_prefill_evicts_only_the_shortfall(pk, L, left):
    """Request 1 = A's first 4 tokens + L - 4 of its own: it hits 0.0 and needs ceil(L / 4) - 1 new
    blocks; 3 are free, the rest is evicted, least recently used first, never the hit."""
    prompt = A[:4] + tokens(L - 4, 63)
    view = run_prefix(pk, exhaustion_setup() + [["request", prompt]], B, n_blocks=10, section=SECTION, twin=True)
    check(f"request 1 ({L} tokens): hits and tokens computed", {"hits": ["0.0"], "computed": L - 4}, view[3]["result"])
    check("blocks the cache holds after it (what is left of request 0's, then request 1's full blocks)",
          ["0.0"] + left + [f"1.{i}" for i in range(1, L // 4)], view[3]["cached"])


def test_a_hit_is_never_evicted_even_the_oldest(pk):
    """Request 0 (A) then request 1 (another prompt) leave, least recently used first, 0.2 0.1 0.0 1.1
    1.0. Request 2 hits 0.0 and is 3 blocks short: it evicts 0.2, 0.1 and 1.1, not its hit 0.0."""
    actions = [["request", A], ["request", tokens(9, 65)], ["release", 0], ["release", 1], ["hold_until", 2],
               ["request", A[:4] + tokens(17, 66)]]
    view = run_prefix(pk, actions, B, n_blocks=14, section=SECTION, twin=True)
    check("request 2: hits and tokens computed", {"hits": ["0.0"], "computed": 17}, view[5]["result"])
    check("blocks the cache holds after it", ["0.0", "1.0", "2.1", "2.2", "2.3", "2.4"], view[5]["cached"])


@pytest.mark.parametrize("L", [25, 27])
def test_cached_prefill_that_cannot_fit_changes_nothing(pk, L):
    """Request 1 needs ceil(L / 4) - 1 = 6 blocks: 3 free + 2 evictable (0.1, 0.2) = 5; evicting the hit
    0.0 would make 6, but a hit is never evicted: MemoryError, and no eviction either."""
    prompt = A[:4] + tokens(L - 4, 64)
    view = run_prefix(pk, exhaustion_setup() + [["request", prompt]] + [["evict", 1]] * 3, B, n_blocks=10,
                      section=SECTION, errors={3: "MemoryError"})
    check("blocks released by evict(1), one at a time, after the failed prefill (recency unchanged)",
          [["0.2"], ["0.1"], ["0.0"]], evicted_one_by_one(view, 4))


BAD = {
    "cached_prefill on a sequence of length 1": ["bad_prefill", "filled", A[:6]],
    "cached_prefill on a sequence with a block and length 0": ["bad_prefill", "reserved", A[:6]],
    "cached_prefill on a sequence of another pool": ["bad_prefill", "other_pool", A[:6]],
    "a token id past vocab after a cached block": ["request", A[:4] + [256 + 44]],
    "an empty prompt": ["request", []],
    "insert with a table too short (13 tokens: 3 full blocks)": ["insert", 1, 13, [0, 1]],
    "insert with a free block after a new one": ["insert", 1, 13, [0, 1, "freed"]],
    "insert with id n_blocks": ["insert", 1, 13, [0, 1, "past"]],
    "insert with id -1": ["insert", 1, 13, [0, "neg", 2]],
    "evict(-1)": ["evict", -1],
}


@pytest.mark.parametrize("case, full", [(c, f) for c in BAD for f in (False, True) if not (f and "free block" in c)],
                         ids=lambda x: {False: "", True: "on a full pool"}.get(x, x) if isinstance(x, bool) else x)
def test_bad_calls_are_value_errors_that_change_nothing(pk, case, full):
    """Request 0 (seq 0) caches A's first block, the test holds a block of its own, and seq 1 is A
    (13 tokens) in blocks the test made: its block 0's key is cached, 1 and 2 are new. On a full pool
    (the test took every free block), the ValueError still comes first (a free block to insert exists
    only on a pool that is not full)."""
    actions = [["request", A[:6]], ["hold", 1], ["seq", A, 3]] + [["hold_until", 0]] * full + [BAD[case]]
    run_prefix(pk, actions, B, n_blocks=10, section=SECTION, errors={len(actions) - 1: "ValueError"})


def test_cached_logits_equal_your_own_prefill_without_the_cache(pk):
    """Requests 1-3 hit request 0's blocks. The test overwrites the K/V of 0.0 and 0.1 (only the cache
    holds them) before request 3: a true hit reads what the test put there, so request 3's logits must
    equal your prefill of the same prompt without the cache, with the same K/V overwritten."""
    S = tokens(10, 60)
    actions = [["request", S + [1, 2]], ["request", S + [3, 4, 5, 6, 7]], ["request", S + [1, 2, 8, 9, 10, 11]],
               ["release", 0], ["release", 1], ["overwrite", 0, 0, 7], ["overwrite", 0, 1, 8], ["request", S + [5]]]
    view = run_prefix(pk, actions, B, section=SECTION, twin=True)
    check("request 3: hits and tokens computed", {"hits": ["0.0", "0.1"], "computed": 3}, view[7]["result"])
