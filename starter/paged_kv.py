"""PagedAttention for the TINY transformer: the one file you edit and submit (CS349E, lecture 7).

Part 1  BlockPool            a refcounted pool of fixed-size KV blocks, lowest free block first
Part 2  PagedSequence,       K/V written and read through a block table;
        paged_step           one step of the model over many sequences, all or nothing
Part 3  blockwise_attention  the vLLM paper's eq. 4, one block at a time
Part 4  PagedSequence.fork   sharing, and lazy copy-on-write inside `reserve`
Part 5  PrefixCache,         (bonus, extra credit) a shared prefix across requests: full blocks
        cached_prefill       cached by content, reused by later prompts, evicted least recently used
Part 6  SwapSpace            (bonus, extra credit) preemption by swapping: a group's blocks copied
                             to CPU blocks and back, the blocks it shared shared again

assignment.md is the specification: "The rules at a glance" lists every graded rule, and the
section named in each docstring below states it in full, with examples. Every function raises
NotImplementedError("TODO Part N: ..."); replace the body, keep the name and the arguments.
Part 5 and Part 6 are bonuses: leave a bonus part's stubs as they are to skip it ("bonus not
        attempted"; Parts 1-4 lose nothing).
You may add helper functions, classes, attributes and private methods. Use only numpy, the
standard library and the lab modules imported here.

Shapes: H = cfg.n_heads, Dh = cfg.d_head, L = cfg.n_layers, B = block_size. All arrays are float64.
"""
from decoding import beam_search, parallel_sample  # noqa: F401  (re-exported: keep this line)
from transformer_lab import attention_core, attn_out, embed, qkv, unembed  # noqa: F401

import numpy as np  # noqa: F401


# ============================================================== Part 1: the block allocator
class BlockPool:
    """A fixed number of physical KV blocks, each holding `block_size` token slots of K and V for
    every layer, with a reference count per block (0: free).

    Block ids are integers in [0, n_blocks): accept numpy integers, hand out Python ints. Any bad
    id (outside the range, negative, or of a free block where one in use is needed) is a
    ValueError with the pool unchanged; a float id is a ValueError too, not a TypeError, because
    the assignment uses one error for every bad id (not graded).
    assignment.md, "Part 1: the block allocator" (its table lists every error).
    """

    def __init__(self, cfg, n_blocks, block_size):
        """Set `cfg`, `n_blocks`, `block_size`, `n_copies = 0`, and the storage `self.k`, `self.v`:
        two separate float64 zero arrays of shape [L, n_blocks, B, H, Dh], so that slot s of block b
        in layer l is k[l, b, s]. Every block starts free."""
        raise NotImplementedError("TODO Part 1: BlockPool.__init__")

    @property
    def n_used(self):
        """The number of blocks whose refcount is > 0.

        n_used, n_free and peak_used are properties here; if you would rather keep plain
        attributes up to date, delete the property (a property cannot be assigned to)."""
        raise NotImplementedError("TODO Part 1: BlockPool.n_used")

    @property
    def n_free(self):
        """n_blocks - n_used."""
        raise NotImplementedError("TODO Part 1: BlockPool.n_free")

    @property
    def peak_used(self):
        """The largest value n_used has ever had since the pool was created (0 at first)."""
        raise NotImplementedError("TODO Part 1: BlockPool.peak_used")

    def alloc(self):
        """Return the LOWEST-numbered free block, its refcount now 1. None free: MemoryError."""
        raise NotImplementedError("TODO Part 1: BlockPool.alloc")

    def incref(self, b):
        """One more holder of block b, which must be in use."""
        raise NotImplementedError("TODO Part 1: BlockPool.incref")

    def decref(self, b):
        """One holder fewer of block b, which must be in use; at refcount 0 it is free again (its
        K/V data is left as it is)."""
        raise NotImplementedError("TODO Part 1: BlockPool.decref")

    def refcount(self, b):
        """The refcount of block b (0 for a free block)."""
        raise NotImplementedError("TODO Part 1: BlockPool.refcount")

    def copy_block(self, b):
        """Allocate a block as alloc does, copy b's K and V into it in EVERY layer, add 1 to
        n_copies and return the new id. b's refcount is left alone. A bad or free b is a
        ValueError, checked before a full pool's MemoryError."""
        raise NotImplementedError("TODO Part 1: BlockPool.copy_block")


# ======================================================= Part 2: paged KV and the paged step
class PagedSequence:
    """One sequence's KV cache: `pool`; `blocks`, the block table (logical block i is physical
    block blocks[i], so position p lives in blocks[p // B], slot p % B); `length`, the number of
    tokens stored.

    The table holds exactly ceil(length / B) blocks, except after a bare `reserve` (one called
    outside paged_step) that made room for more tokens than have been written since.
    assignment.md, "Part 2: paged KV and the paged step".
    """

    def __init__(self, pool):
        """An empty sequence on `pool`: blocks = [], length = 0. Allocates nothing."""
        raise NotImplementedError("TODO Part 2: PagedSequence.__init__")

    def reserve(self, n):
        """Make room for n >= 1 more tokens (n < 1: ValueError); do not change `length`.

        First copy-on-write, if due; then alloc blocks until len(blocks) * B >= length + n. All
        or nothing: if the copy plus the new blocks are more than pool.n_free, MemoryError and
        nothing changes.

        Copy-on-write lives here but is graded in Part 4 ("Part 4: sharing and copy-on-write"):
        it is due when length % B != 0 and refcount(blocks[-1]) > 1; then blocks[-1] is replaced
        by pool.copy_block(blocks[-1]) and the old block is decref'd. Counting that copy is Part
        2's: a test can share a block before you write fork (pool.incref), and a write into it
        then needs a block for the copy.
        """
        raise NotImplementedError("TODO Part 2: PagedSequence.reserve")

    def write(self, layer, start, k, v):
        """Store k, v (each [T, H, Dh]) of `layer` at positions start .. start+T-1, through the
        table, in pool.k and pool.v."""
        raise NotImplementedError("TODO Part 2: PagedSequence.write")

    def read(self, layer, length):
        """Gather positions 0 .. length-1 of `layer` through the table into (K, V), each
        [length, H, Dh]. `length` may exceed self.length, up to the capacity."""
        raise NotImplementedError("TODO Part 2: PagedSequence.read")

    def free(self):
        """decref every block of the table, then blocks = [] and length = 0. The sequence can be
        used again."""
        raise NotImplementedError("TODO Part 2: PagedSequence.free")

    # ========================================================== Part 4: sharing and copy-on-write
    def fork(self):
        """A new PagedSequence on the same pool sharing every block: the same ids in a new list,
        the same length, one incref per entry. Allocates and copies nothing (the copy is made
        later, in `reserve`). assignment.md, "Part 4: sharing and copy-on-write"."""
        raise NotImplementedError("TODO Part 4: PagedSequence.fork")


def paged_step(params, cfg, seqs, chunks):
    """Advance each seqs[i] by chunks[i] (a 1-D list or array of token ids) and return a list of
    logits arrays, [len(chunks[i]), cfg.vocab] each, equal to transformer_lab.forward with a
    contiguous KVCache that saw the same tokens, to 1e-10.

    In this order: validate everything (ValueError, nothing changed); count the blocks the whole
    step needs, exactly (too few free: MemoryError, nothing changed): per sequence
    max(0, ceil((length + T) / B) - len(blocks)) new ones, plus the copies: a partly filled last
    block with refcount r that n of its holders write in this step is copied min(n, r - 1) times; then
    for each sequence in list order: reserve, embed, and per layer qkv, write, read,
    attention_core and attn_out; then length += T, once, and unembed.
    assignment.md, "Part 2: paged KV and the paged step" (the list of bad inputs, the count).
    """
    raise NotImplementedError("TODO Part 2: paged_step")


# ====================================================== Part 3: blockwise attention (eq. 4)
def blockwise_attention(q, seq, layer):
    """One query q [H, Dh] attends to all seq.length positions of `layer`; returns out [H, Dh],
    equal to attention_core(q[None, None], K, V, seq.length - 1)[0, 0] to 1e-12, computed block
    by block (paper eq. 4) over the filled slots of the first ceil(length / B) blocks:
    scores / sqrt(Dh) per block, then a single softmax PER HEAD over all positions of all blocks
    (each head's own max and sum: not per block, and not one max over all heads, which gives NaN),
    then the weighted sum of V per block. seq.length < 1: ValueError.

    `seq` is an object with only seq.pool.k, seq.pool.v, seq.pool.block_size, seq.pool.cfg,
    seq.blocks and seq.length, and no methods (seq.read fails). Its pool.k and pool.v serve one
    block per index: read seq.pool.k[layer, b] (or [layer, b, :n]) block by block; many blocks in
    one index or np.asarray(pool.k) is refused. Per-block scores in a list or stacked are both fine.
    assignment.md, "Part 3: blockwise attention".
    """
    raise NotImplementedError("TODO Part 3: blockwise_attention")


# ============================================ Part 5 (bonus): shared prefix across requests
class PrefixCache:
    """A cache of FULL blocks by content, for prompts that start alike (a system prompt).

    The key of logical block i of a token list t is the whole prefix that block ends,
    tuple(t[:(i + 1) * B]) with Python ints (or a hash chain, if a hit then compares the whole
    prefix: a collision must be a miss). The same B tokens after a different prefix are a
    different key. A partly filled block is never cached.

    The cache holds ONE reference (pool.incref) on every block it caches, so a cached block stays
    in use after every sequence holding it is freed; pool.n_used counts it. One physical block
    caches at most one key.

    Recency: the cache orders its blocks from least to most recently used. Only `insert` changes
    that order (cached_prefill through the insert it ends with; lookup and evict never do).
    """

    def __init__(self, pool):
        """An empty cache on `pool`: set the attributes `pool` and `n_hit_tokens = 0` (the number of
        prompt tokens cached_prefill did not compute, summed over its calls)."""
        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.__init__")

    @property
    def n_cached(self):
        """The number of blocks the cache holds (one key each). A plain attribute kept up to date
        works too (delete the property then)."""
        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.n_cached")

    def lookup(self, tokens):
        """The list of physical blocks caching logical blocks 0, 1, 2, ... of `tokens`, in order,
        stopping at the first block whose key is not cached, and at most (len(tokens) - 1) // B
        blocks, so that at least one token is left to compute ([] for fewer than B + 1 tokens).
        Changes nothing: no reference, no recency, no counter.
        """
        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.lookup")

    def insert(self, tokens, blocks):
        """Cache the full blocks of a sequence: blocks[i] holds the K/V of logical block i of
        `tokens` (a block table; the caller promises it, you need not check). Returns the number of
        blocks newly cached.

        Only blocks[:len(tokens) // B] matter (a longer table is fine: the rest is never cached).

          1. Errors first, nothing changed: len(blocks) < len(tokens) // B, or a free or invalid id
             among the blocks step 2 would cache -> ValueError. Only those ids need checking (a bad
             id under a key already cached is not graded: such a table does not hold its tokens).
          2. For each full block i (i < len(tokens) // B) whose key is not cached yet: cache
             blocks[i] under that key and pool.incref it, unless blocks[i] already caches another
             key (then skip it: that key stays uncached). A key cached already keeps its block.
          3. Recency: the cached block of every full block i of `tokens` (cached in step 2 or
             before; possibly another physical block than blocks[i]) becomes the most recently
             used, from the deepest block down to block 0: block 0 ends newest, the deepest block
             of this chain oldest among them. A key left uncached in step 2 counts nothing (and
             blocks[i], which caches another key, keeps its place).
        The same id twice in one table is not graded.
        """
        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.insert")

    def evict(self, n):
        """Release up to n cached blocks that only the cache holds (pool.refcount(b) == 1), least
        recently used first over the whole cache: forget the key, pool.decref the block. Blocks
        that a sequence still holds are skipped. Returns the number released (0 if none can be).
        No cascade: a cached block whose parent block was evicted stays cached until its own turn.
        n not an integer >= 0 -> ValueError.
        """
        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.evict")


def cached_prefill(params, cfg, seq, prompt, cache):
    """Prefill the empty sequence `seq` with `prompt`, computing only what `cache` does not hold,
    and return the logits of the computed positions: [len(prompt) - hit tokens, cfg.vocab]. They
    must equal transformer_lab.forward's logits of those positions to 1e-10.

    In this order:
      1. ValueError, nothing changed: seq not empty (length 0 and no blocks), seq.pool is not
         cache.pool, or prompt not a valid chunk (the paged_step rules: 1-D, non-empty, ids in
         [0, cfg.vocab), at most cfg.max_len tokens).
      2. hits = cache.lookup(prompt). The blocks still needed are ceil(len(prompt) / B) -
         len(hits). If fewer are free, the shortfall must come from cache.evict; if even evicting
         every evictable block except the hits cannot make room: MemoryError, and NOTHING has
         changed (no eviction either).
      3. pool.incref each hit and put the hits in seq.blocks; seq.length = len(hits) * B.
      4. cache.evict(the shortfall), if any (the hits are safe now: their refcount is >= 2).
      5. paged_step on the rest of the prompt, prompt[len(hits) * B:].
      6. cache.n_hit_tokens += len(hits) * B; cache.insert(prompt, seq.blocks); return the logits.
    """
    raise NotImplementedError("TODO Part 5 (bonus): cached_prefill")


# ============================================== Part 6 (bonus): preemption by swapping
class SwapSpace:
    """CPU memory for the blocks of preempted sequence groups (a sequence and its forks, which share
    blocks): swap_out copies a group's blocks here and gives them back to the pool; swap_in takes
    pool blocks again and copies them back. Its `k` and `v` have the pool's layout, with n_blocks
    CPU blocks: [L, n_blocks, B, H, Dh]. Uses only pool.alloc, incref, decref, n_free and pool.k,
    pool.v (and PagedSequence(pool) for the sequences swap_in returns).
    assignment.md, "Part 6 (bonus): preemption by swapping".
    """

    def __init__(self, pool, n_blocks):
        """Set `pool`, `n_blocks`, `n_out = n_in = 0` (blocks copied out / in, ever), and the CPU
        storage `self.k`, `self.v`: two separate float64 zero arrays [L, n_blocks, B, H, Dh]
        (L, H, Dh from pool.cfg, B = pool.block_size). Every CPU block is free."""
        raise NotImplementedError("TODO Part 6 (bonus): SwapSpace.__init__")

    @property
    def n_free(self):
        """The number of CPU blocks holding nothing. A plain attribute kept up to date works too."""
        raise NotImplementedError("TODO Part 6 (bonus): SwapSpace.n_free")

    def swap_out(self, seqs):
        """Preempt a group: copy its blocks to CPU blocks, give its references back, empty it. Returns
        a handle (any object of your choice) for swap_in.

          1. ValueError, nothing changed: `seqs` empty, a sequence twice in it, or a sequence whose
             pool is not this space's pool.
          2. d = the number of DISTINCT block ids in the tables of `seqs` (forks share blocks: a
             block held by 3 forks counts once). d > self.n_free: MemoryError, nothing changed.
          3. Copy each distinct block's K and V (every layer, the whole block) into a free CPU block
             of its own (n_out += d); remember every table (lengths, and which CPU block each entry
             names) under the handle.
          4. pool.decref every table ENTRY once (a block 3 forks share: 3 decrefs). A block someone
             outside the group holds too (another sequence, the prefix cache) stays theirs.
          5. Every sequence of the group: blocks = [], length = 0.
        """
        raise NotImplementedError("TODO Part 6 (bonus): SwapSpace.swap_out")

    def swap_in(self, handle):
        """Resume a group: return NEW PagedSequences of the pool holding it again, in swap_out's order.

          1. ValueError, nothing changed: `handle` is not one this space returned, or it was swapped
             in already.
          2. d = the number of distinct CPU blocks of the group. d > pool.n_free: MemoryError,
             nothing changed, and the handle is still good (try again once blocks are free).
          3. One pool.alloc() per distinct CPU block, in order of first appearance (sequence 0's
             table from its first entry, then sequence 1's, ...), its K and V copied back
             (n_in += d); then one pool.incref for every further table entry naming it, so blocks
             the group shared come back shared (refcount = the entries naming them).
          4. The CPU blocks are free again; the new sequences have the old lengths and tables of the
             same shape (other ids). Decoding them gives the logits the group would have given
             had it never left.
        """
        raise NotImplementedError("TODO Part 6 (bonus): SwapSpace.swap_in")
