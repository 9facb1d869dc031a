"""Part 5 (bonus), the prefix cache, on hidden inputs. Scripts of requests prefilled through one
PrefixCache, sequences the test builds itself (it takes their blocks with pool.alloc and stores
their K/V: no paged_step), and the cache's own calls (scenarios.prefix_script). Judged on what
Part 5 owns (rules.part5_view): hits and lookups with every block named by what it was made for,
the blocks the cache holds (its own reference), n_cached, n_hit_tokens, errors and all-or-nothing;
and the logits of a cached prefill against the same implementation's prefill without the cache.
Every script runs on TINY. Each check's core cases are the same for every seed (inputs.core_rng);
its last case draws tokens, block sizes, lengths and pool sizes from the student's seed.
The keys, eviction and errors scripts never call paged_step except through cached_prefill."""
from rules import twin_chain, twin_pokes, twin_requests
from scenarios import prefix_twin

from grader.hidden.inputs import Case, core_rng, pick
from grader.hidden.judges import PART5_FIELDS, naming_part2, prefix_judge

VOCAB = 256          # TINY's


def prefix_case(name, actions, block_size, n_blocks=64, twin=False, param_seed=0):
    """twin=True: also every request's twin, the same prompt prefilled without the cache (twin_calls)."""
    inputs = {"cfg": None, "param_seed": param_seed, "n_blocks": n_blocks, "block_size": block_size,
              "actions": actions, "twin": twin}
    return Case(name, "prefix_script", inputs, (lambda expected, got: twin_calls(inputs, expected, got)) if twin else None)


def twin_calls(inputs, expected, got):
    """One scenarios.prefix_twin call per request of rules.twin_requests: as many hit blocks as the
    submission's table shares (its cache decides them), computed as the reference's run computed them
    (rules.twin_chain) when it shared as many, overwritten where this run's overwrite actions wrote
    (the test's own seeds on the blocks they targeted: rules.twin_pokes), the prompts as the plan has
    them."""
    B, calls = inputs["block_size"], []
    for n, h in twin_requests(expected, got, B):
        chain = twin_chain(expected["twins"][n] or {}, expected["records"][n]["op"][1], h, B)
        calls.append(prefix_twin(inputs["cfg"], inputs["param_seed"], inputs["n_blocks"], B, chain,
                                 twin_pokes(got, n, h, B)))
    return calls


def tokens(rng, n):
    """n token ids from 1 to VOCAB - 1: every id is valid, but the cache's cases are not about which ids
    paged_step accepts (Part 2's, tested there), so id 0, the one a bound check gets wrong, is left out."""
    return [int(t) for t in rng.integers(1, VOCAB, n)]


def seed(rng):
    return int(rng.integers(1 << 30))


def other(rng, first, n):
    """n tokens whose first differs from `first`: a question that leaves a shared prompt at once."""
    out = tokens(rng, n)
    if out and out[0] == first:
        out[0] = first % (VOCAB - 1) + 1
    return out


def system_prompt(rng, B, blocks=(2, 4), rest=None):
    """A shared prompt of k full blocks and r more tokens (0 <= r < B; `rest` fixes r, `blocks` an int k)."""
    k = blocks if isinstance(blocks, int) else int(rng.integers(*blocks))
    return tokens(rng, k * B + (int(rng.integers(0, B)) if rest is None else rest))


def plan_hits(rng):
    cases, core = [], core_rng("prefix_cache.hits")
    for g, B, k, r in ((core, 3, 2, 1), (core, 4, 3, 0), (core, 1, 7, 0), (rng, pick(rng, (2, 5, 7, 8)), None, None)):
        S = system_prompt(g, B, blocks=k or (2, 4), rest=r)
        k = len(S) // B
        q1 = tokens(g, int(g.integers(1, 2 * B + 2)))
        q2 = other(g, q1[0], int(g.integers(1, 2 * B + 2)))
        j = int(g.integers(1, k + 1)) * B
        actions = [["request", S + q1], ["request", S + q2], ["request", S + q1],
                   ["lookup", S[:B]], ["lookup", S[:B + 1]], ["lookup", S[:j]], ["lookup", S + q1 + q2],
                   ["release", 0], ["release", 1],
                   ["request", S[:k * B]], ["request", S[:j] + other(g, S[j] if j < len(S) else q1[0], 2)],
                   ["request", other(g, S[0], int(g.integers(1, 3 * B)))], ["request", S + q2]]
        cases.append(prefix_case(f"block size {B}", actions, B, n_blocks=12 * (len(S) + 4 * B) // B + 8))
    return cases


def plan_keys(rng):
    cases, core = [], core_rng("prefix_cache.keys")
    for g, B in ((core, 2), (core, 5), (rng, pick(rng, (3, 4, 6, 8)))):
        P, Q, R, R2, R3, Y, Z = (tokens(g, B) for _ in range(7))
        X, Q2 = other(g, P[0], B), other(g, Q[0], B)
        tail = tokens(g, int(g.integers(1, B))) if B > 1 else []
        t = tokens(g, 1)
        actions = [["seq", P + Q + R + tail, seed(g)], ["insert", 0], ["lookup", []], ["lookup", t],
                   ["lookup", X + Q + R + t], ["lookup", P + Q2 + R + t], ["lookup", P + Q + R],
                   ["lookup", P + Q + R + t],
                   ["seq", X + Q + R, seed(g)], ["insert", 1], ["lookup", X + Q + R + t],
                   ["seq", P + Q + R + t, seed(g)], ["insert", 2], ["insert", 0],
                   ["seq", P + Q + R2 + R3, seed(g)], ["insert", 3], ["lookup", P + Q + R2 + R3 + t],
                   ["seq", Y + Z, seed(g)], ["insert", 4, 2 * B, [[0, 0], 1]], ["lookup", Y + Z + t],
                   ["lookup", P + Q + R + t], ["insert", 4], ["lookup", Y + Z + t], ["lookup", t + P + Q]]
        cases.append(prefix_case(f"block size {B}", actions, B))
    return cases


def plan_logits(rng):
    cases, core = [], core_rng("prefix_cache.logits")
    for g, B, k, r in ((core, 3, 2, 2), (core, 4, 3, 0), (rng, pick(rng, (2, 5, 8, 16)), None, None)):
        S = system_prompt(g, B, blocks=k or (2, 4), rest=r)
        q = [tokens(g, int(g.integers(1, 2 * B + 2)))]
        q += [other(g, q[0][0], int(g.integers(1, 2 * B + 2))) for _ in range(3)]
        # Overwrites come after every block a later request hits was computed: a block computed after
        # an overwrite of its prefix holds K/V that no prefill without the cache would compute.
        actions = [["request", S + q[0]], ["request", S + q[1]], ["request", S + q[0] + q[3]],
                   ["release", 0], ["release", 1],
                   ["overwrite", 0, 0, seed(g)], ["overwrite", 0, 1, seed(g)],      # the cache alone holds them
                   ["request", S + q[2]],                                             # a true hit reads them
                   ["overwrite", 2, len(S + q[0]) // B - 1, seed(g)],              # seq 2 still holds it
                   ["request", S + q[0] + q[3]]]
        cases.append(prefix_case(f"block size {B}", actions, B, twin=True, param_seed=int(g.integers(1 << 20))))
    return cases


def plan_eviction(rng):
    B, core = 3, core_rng("prefix_cache.eviction")
    P, Q, R, R2, R3, W = (tokens(core, B) for _ in range(6))
    t = tokens(core, 1)
    actions = [["seq", P + Q + R + t, seed(core)], ["insert", 0],          # 0.0 0.1 0.2 cached, oldest first 0.2 0.1 0.0
               ["seq", P + Q + R2, seed(core)], ["insert", 1],             # its use: 1.2 0.1 0.0 -> 0.2 1.2 0.1 0.0
               ["release", 0], ["release", 1], ["evict", 1],               # the tail: 0.2
               ["seq", P + Q + R3 + W, seed(core)], ["insert", 2],         # 1.2 2.2 2.3 0.1 0.0; seq 2 holds 2.x
               ["evict", 0], ["evict", 1], ["evict", 5],                   # 1.2, then 0.1 0.0 (2.2 2.3 held)
               ["lookup", P + Q + R3 + W + t],                            # no cascade: 2.2, 2.3 cached, unreachable
               ["seq", P + Q, seed(core)], ["insert", 3], ["lookup", P + Q + R3 + W + t],
               ["release", 2], ["release", 3], ["evict", 1], ["evict", 2], ["evict", 9]]
    cases = [prefix_case(f"a hand-made script, block size {B}", actions, B), skipped_key_case(core, 4)]
    for i, g in enumerate((core, rng)):
        B = pick(g, (1, 2, 3, 4))
        cases.append(prefix_case(f"random script {i + 1}, block size {B}", random_eviction_script(g, B), B))
    return cases


def skipped_key_case(rng, B):
    """An insert that skips a key (its block caches another key) still counts the cached block of every
    other full block as used, those before the skipped one included."""
    P, Q, R, Y, Z = (tokens(rng, B) for _ in range(5))
    X, W = other(rng, P[0], B), other(rng, Q[0], B)
    t = tokens(rng, 1)
    actions = [["seq", P + Q + R + t, seed(rng)], ["insert", 0],          # oldest first: 0.2 0.1 0.0
               ["seq", X + Y, seed(rng)], ["insert", 1],                  # 0.2 0.1 0.0 1.1 1.0
               ["seq", P + W + Z + t, seed(rng)],
               ["insert", 2, 3 * B, [[0, 0], [1, 1], 2]],                 # P W skipped (1.1 caches X Y), P W Z
               ["release", 0], ["release", 1], ["release", 2],            # cached as 2.2: 0.2 0.1 1.1 1.0 2.2 0.0
               *[["evict", 1]] * 7]
    return prefix_case(f"an insert that skips a key, block size {B}", actions, B)


def random_eviction_script(rng, B, length=40):
    """Sequences on a few shared prefixes, inserted, released and evicted in random order."""
    bases = [tokens(rng, int(rng.integers(2, 5)) * B) for _ in range(3)]
    live, actions, n = [], [], 0
    for _ in range(length):
        roll = rng.random()
        if roll < 0.35 or not live:
            base = pick(rng, bases)
            cut = int(rng.integers(1, len(base) // B + 1)) * B
            actions += [["seq", base[:cut] + tokens(rng, int(rng.integers(0, 2 * B + 1))), seed(rng)], ["insert", n]]
            live.append(n)
            n += 1
        elif roll < 0.55:
            actions.append(["release", live.pop(int(rng.integers(len(live))))])
        elif roll < 0.65:
            actions.append(["insert", pick(rng, live)])
        elif roll < 0.9:
            actions.append(["evict", int(rng.integers(0, 4))])
        else:
            base = pick(rng, bases)
            actions.append(["lookup", base + tokens(rng, 1)])
    return actions


def plan_exhaustion(rng):
    cases, core = [], core_rng("prefix_cache.exhaustion")
    for g, B in ((core, 3), (core, 5), (rng, pick(rng, (4, 6)))):
        A = tokens(g, 3 * B + int(g.integers(1, B)))          # 3 full blocks cached, a 4th partly filled
        U = other(g, A[0], 2 * B + int(g.integers(1, B)))     # 2 full blocks cached
        n = 12 + int(g.integers(0, 4))

        def longer(blocks):
            """A's first block, then tokens of its own: `blocks` more blocks (never a whole number of blocks)."""
            return A[:B] + other(g, A[B], blocks * B - int(g.integers(1, B)))

        actions = [["request", A], ["request", U], ["release", 0], ["release", 1],    # LRU first: 0.2 0.1 0.0 1.1 1.0
                   ["hold_until", 2], ["request", longer(5)],      # short by 3: 0.2 0.1 1.1, never the hit 0.0
                   ["release", 2],                                 # 1 free; 5 cached blocks it may evict
                   ["request", longer(7)],                         # 1 + 5 < 7: MemoryError, nothing evicted
                   ["request", longer(6)],                         # 1 + 5 = 6: evicts all 5, never 0.0
                   ["release", 4], ["unhold"], ["hold_until", 0],
                   ["request", longer(2)],                         # evicts the two oldest it may
                   ["request", A + tokens(g, B)], ["unhold"], ["request", longer(5)]]
        cases.append(prefix_case(f"block size {B}, {n} blocks", actions, B, n_blocks=n))
    return cases


def plan_errors(rng):
    return [errors_case(core_rng("prefix_cache.errors"), 3), errors_case(rng, pick(rng, (2, 4, 5)))]


def errors_case(rng, B):
    S = tokens(rng, 2 * B + int(rng.integers(1, B + 1)))
    T = tokens(rng, 3 * B + 1)
    bad = int(rng.integers(VOCAB, VOCAB + 50))
    actions = [["request", S], ["hold", 1],
               ["bad_prefill", "filled", S], ["bad_prefill", "reserved", S], ["bad_prefill", "other_pool", S],
               ["request", S[:2 * B] + [bad]], ["request", S[:2 * B] + [1, bad, 2]], ["request", []],
               ["seq", T, seed(rng)], ["insert", 4, len(T), [0, 1]], ["insert", 4, len(T), [0, "freed", 2]],
               ["insert", 4, len(T), [0, 1, "past"]], ["insert", 4, len(T), ["neg", 1, 2]],
               ["evict", -1], ["evict", 0], ["insert", 4], ["release", 4],
               ["hold_until", 0], ["request", S[:2 * B] + [bad]], ["bad_prefill", "filled", S],
               ["request", S + tokens(rng, 4 * B)]]                # and the pool is full: MemoryError
    return prefix_case(f"block size {B}", actions, B, n_blocks=24)


PLANS = {
    "prefix_cache.hits": plan_hits,
    "prefix_cache.keys": plan_keys,
    "prefix_cache.logits": plan_logits,
    "prefix_cache.eviction": plan_eviction,
    "prefix_cache.exhaustion": plan_exhaustion,
    "prefix_cache.errors": plan_errors,
}
JUDGES = {check: naming_part2(prefix_judge(PART5_FIELDS[check.split(".")[1]], twin=check == "prefix_cache.logits"))
          for check in PLANS}


def test_prefix_cache(case, judge):
    judge(case)
