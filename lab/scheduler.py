"""A serving loop that preempts (the vLLM paper's §4.5), run on your paged_kv: more requests than the
pool holds at once.

Each request is a sequence group: a prompt prefilled once and forked into n samples (they share the
prompt's blocks, as in parallel sampling). Requests are admitted in order while their prompt fits;
every step decodes one token for every running sample. When a step does not fit the free blocks,
the latest group is preempted, all of it: swapped out to CPU blocks (SwapSpace, Part 6) or freed and
recomputed later (a prefill of its prompt and of the tokens it had, Parts 1-4). Preempted groups are
resumed first come first served as soon as their blocks (and a step's worth more) are free, before
any new request is admitted. Every sample draws its tokens from a random stream of its own (request,
sample, position), so outputs do not depend on when a group ran: they equal an ample pool's.
"""
import math
from collections import Counter

import numpy as np

from decoding import _sample        # the drivers' sampling: one uniform draw per token

SWAP, RECOMPUTE = "swap", "recompute"


class Group:
    """One request: its prompt, its samples' tokens, and where its K/V is while it waits."""

    def __init__(self, number, prompt, n):
        self.number, self.prompt, self.n = number, np.asarray(prompt, dtype=np.int64), n
        self.tokens = [[] for _ in range(n)]      # per sample, every token drawn; the last is not fed yet
        self.seqs, self.handle, self.blocks = [], None, 0


def step_need(pool, seqs):
    """The blocks one decode step of `seqs` takes, as paged_step counts them (the contract, Part 2): a
    new block for a full last block, and min(n, refcount - 1) copies of a shared, partly filled one."""
    B = pool.block_size
    shared = Counter(s.blocks[-1] for s in seqs if s.length % B)
    return sum(s.length % B == 0 for s in seqs) + sum(min(n, pool.refcount(b) - 1) for b, n in shared.items())


class Scheduler:
    def __init__(self, pk, params, cfg, n_blocks, block_size, preempt=None, seed=0):
        """preempt: SWAP, RECOMPUTE, or None (a pool that holds everything: never preempts)."""
        self.pk, self.params, self.cfg, self.preempt, self.seed = pk, params, cfg, preempt, seed
        self.pool = pk.BlockPool(cfg, n_blocks, block_size)
        self.space = pk.SwapSpace(self.pool, n_blocks) if preempt == SWAP else None   # room for every group
        self.running, self.preempted = [], []       # in the order they were admitted
        self.stats = {"steps": 0, "preemptions": 0, "recomputed": 0}

    def draw(self, group, j, logits):
        rng = np.random.default_rng([self.seed, group.number, j, len(group.tokens[j])])
        group.tokens[j].append(_sample(np.asarray(logits)[-1], 1.0, rng))

    def room(self, group, blocks):
        """Whether `blocks` and the group's next step (at most a block per sample) fit the free blocks."""
        return blocks + group.n <= self.pool.n_free

    def admit(self, group):
        first = self.pk.PagedSequence(self.pool)
        (logits,) = self.pk.paged_step(self.params, self.cfg, [first], [group.prompt])
        group.seqs = [first] + [first.fork() for _ in range(group.n - 1)]
        for j in range(group.n):
            self.draw(group, j, logits)
        self.running.append(group)

    def preempt_latest(self):
        group = self.running.pop()
        group.blocks = len({b for s in group.seqs for b in s.blocks})
        if self.preempt == SWAP:
            group.handle = self.space.swap_out(group.seqs)
        else:
            for s in group.seqs:
                s.free()
        group.seqs = []
        self.preempted.append(group)
        self.preempted.sort(key=lambda g: g.number)
        self.stats["preemptions"] += 1

    def resume(self, group):
        if self.preempt == SWAP:
            group.seqs = self.space.swap_in(group.handle)
        else:       # recompute: the prompt once, forked, then each sample's tokens but the one not fed yet
            first = self.pk.PagedSequence(self.pool)
            self.pk.paged_step(self.params, self.cfg, [first], [group.prompt])
            group.seqs = [first] + [first.fork() for _ in range(group.n - 1)]
            fed = [t[:-1] for t in group.tokens]
            if fed[0]:
                self.pk.paged_step(self.params, self.cfg, group.seqs, fed)
            self.stats["recomputed"] += len(group.prompt) + sum(map(len, fed))
        self.running.append(group)
        self.running.sort(key=lambda g: g.number)

    def step(self):
        """One decode step of every running sample, preempting the latest group while it does not fit."""
        while step_need(self.pool, [s for g in self.running for s in g.seqs]) > self.pool.n_free:
            if len(self.running) == 1 or self.preempt is None:
                raise MemoryError("the pool cannot hold one step of the running requests")
            self.preempt_latest()
        seqs = [s for g in self.running for s in g.seqs]
        outs = self.pk.paged_step(self.params, self.cfg, seqs, [[t[-1]] for g in self.running for t in g.tokens])
        pairs = [(g, j) for g in self.running for j in range(g.n)]
        for (g, j), logits in zip(pairs, outs):
            self.draw(g, j, logits)
        self.stats["steps"] += 1


def serve(pk, params, cfg, prompts, n, max_new, n_blocks, block_size, preempt=None, seed=0):
    """Serve every prompt (n samples of max_new tokens each) -> (outputs: per prompt its samples' tokens,
    stats: steps, preemptions, tokens recomputed, blocks swapped out and in, peak blocks)."""
    sched = Scheduler(pk, params, cfg, n_blocks, block_size, preempt, seed)
    waiting = [Group(i, p, n) for i, p in enumerate(prompts)]
    done = []
    while waiting or sched.running or sched.preempted:
        while sched.preempted and sched.room(sched.preempted[0], sched.preempted[0].blocks):
            sched.resume(sched.preempted.pop(0))
        while waiting and not sched.preempted and \
                sched.room(waiting[0], math.ceil(len(waiting[0].prompt) / block_size)):
            sched.admit(waiting.pop(0))
        if not sched.running:
            raise MemoryError("the pool cannot hold one request")
        sched.step()
        for g in [g for g in sched.running if len(g.tokens[0]) == max_new]:
            for s in g.seqs:
                s.free()
            sched.running.remove(g)
            done.append(g)
    space = sched.space
    stats = {**sched.stats, "peak": sched.pool.peak_used, "out": space.n_out if space else 0,
             "in": space.n_in if space else 0}
    return [g.tokens for g in sorted(done, key=lambda g: g.number)], stats
