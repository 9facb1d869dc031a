"""PagedAttention for the TINY transformer: the one file you edit and submit (CS349E, lecture 7).

Part 1  BlockPool            a refcounted pool of fixed-size KV blocks, lowest free block first
Part 2  PagedSequence,       K/V written and read through a block table;
        paged_step           one step of the model over many sequences, all or nothing
Part 3  blockwise_attention  the vLLM paper's eq. 4, one block at a time
Part 4  PagedSequence.fork   sharing, and lazy copy-on-write inside `reserve`
Part 5  PrefixCache,         (bonus, extra credit) a shared prefix across requests: full blocks
        cached_prefill       cached by content, reused by later prompts, evicted least recently used

Read assignment.md first: it has the pictures, the exact rules and an FAQ. Every function below
raises NotImplementedError("TODO Part N: ..."); replace the body, keep the name and the arguments.
Part 5 is a bonus: leave its stubs as they are if you do not attempt it (Parts 1-4 lose nothing).
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
    every layer, with a reference count per block.

    A block is free when its refcount is 0 and in use when it is >= 1. A block id is an integer
    in [0, n_blocks); numpy integers must be accepted as ids, and the ids you hand out should be
    Python ints (`int(...)`), so block tables print as [0, 2, 4].

    Errors (the pool must be unchanged after any of them):
      - ValueError: an id outside [0, n_blocks) (negative ids too: no Python-style wrap-around)
        given to incref, decref, refcount or copy_block; incref, decref or copy_block of a FREE
        block (a decref of a free block is a double free).
      - MemoryError: alloc or copy_block when no block is free.
    """

    def __init__(self, cfg, n_blocks, block_size):
        """Set the attributes `cfg`, `n_blocks`, `block_size` and `n_copies = 0`, and the storage

            self.k, self.v   two separate float64 zero arrays, each of shape
                             [cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head]

        so that slot s of physical block b in layer l is k[l, b, s] (a [H, Dh] array). Every block
        starts free (refcount 0); n_used = 0, n_free = n_blocks, peak_used = 0.
        n_blocks < 1 or block_size < 1 should be a ValueError (not graded).
        """
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
        """Take the LOWEST-numbered free block, set its refcount to 1 and return its id (an int).

        The lowest-free-first rule makes block tables deterministic: after blocks 0, 2 and 4 of
        0..4 are freed, the next three allocs return 0, 2, 4 (in that order), whatever order they
        were freed in. Update n_used (and peak_used).
        No free block: raise MemoryError and change nothing.
        """
        raise NotImplementedError("TODO Part 1: BlockPool.alloc")

    def incref(self, b):
        """One more holder of block b: refcount += 1. b must be a valid id of a block in use,
        else ValueError (pool unchanged)."""
        raise NotImplementedError("TODO Part 1: BlockPool.incref")

    def decref(self, b):
        """One holder fewer: refcount -= 1; when it reaches 0 the block is free again (n_used
        drops and alloc may hand it out). b must be a valid id of a block in use, else ValueError
        (pool unchanged). The block's K/V data is left as it is: nobody may rely on a reused block
        being zero."""
        raise NotImplementedError("TODO Part 1: BlockPool.decref")

    def refcount(self, b):
        """The refcount of block b (0 for a free block). An id outside [0, n_blocks): ValueError."""
        raise NotImplementedError("TODO Part 1: BlockPool.refcount")

    def copy_block(self, b):
        """Allocate a new block (the lowest free one, as alloc), copy b's K and V into it in EVERY
        layer, add 1 to n_copies and return the new id.

        b's refcount is left alone: the caller decides whether to decref it.
        Checks in this order, each leaving the pool unchanged (n_copies included):
          1. b invalid or free -> ValueError
          2. no free block     -> MemoryError
        """
        raise NotImplementedError("TODO Part 1: BlockPool.copy_block")


# ======================================================= Part 2: paged KV and the paged step
class PagedSequence:
    """One sequence's KV cache, stored in a pool's blocks through a block table.

    Attributes: `pool`; `blocks`, the block table (a list of physical block ids: logical block i
    of this sequence is physical block blocks[i]); `length`, the number of tokens whose K/V are
    stored. Token position p lives in block blocks[p // B] at slot p % B.

    Between steps, len(blocks) == ceil(length / B) exactly; only inside a step, after `reserve`,
    may the table hold more.
    """

    def __init__(self, pool):
        """An empty sequence on `pool`: blocks = [], length = 0. Allocates nothing."""
        raise NotImplementedError("TODO Part 2: PagedSequence.__init__")

    def reserve(self, n):
        """Make room for n >= 1 more tokens; do not change `length`.

        In this order:
          1. n < 1: ValueError.
          2. Count what is needed: 1 copy if copy-on-write is due (Part 4: the last block is
             partly filled, length % B != 0, and shared, refcount > 1), plus the new blocks that
             bring the capacity len(blocks) * B up to >= length + n. If that is more than
             pool.n_free: MemoryError, and NOTHING has changed (all or nothing).
          3. Copy-on-write if due: blocks[-1] = pool.copy_block(old last block), then decref the
             old one. (Part 4; until then, sequences are never shared and this never happens.)
          4. alloc the new blocks one by one and append them to the table.
        """
        raise NotImplementedError("TODO Part 2: PagedSequence.reserve")

    def write(self, layer, start, k, v):
        """Store k, v (each [T, H, Dh]) of `layer` at token positions start .. start+T-1, through
        the table: position p goes to pool.k[layer, blocks[p // B], p % B] (and the same in
        pool.v). The positions must be within the reserved capacity (not checked, not graded).
        """
        raise NotImplementedError("TODO Part 2: PagedSequence.write")

    def read(self, layer, length):
        """Gather positions 0 .. length-1 of `layer` through the table into contiguous arrays
        (K, V), each [length, H, Dh]. `length` may exceed self.length, up to the capacity:
        paged_step reads the chunk it has just written before it updates self.length.
        """
        raise NotImplementedError("TODO Part 2: PagedSequence.read")

    def free(self):
        """decref every block of the table, then blocks = [] and length = 0. On an empty sequence
        it does nothing. A freed sequence can be used again (the next step starts at position 0)."""
        raise NotImplementedError("TODO Part 2: PagedSequence.free")

    # ========================================================== Part 4: sharing and copy-on-write
    def fork(self):
        """A new PagedSequence on the same pool that shares every block of this one: the same
        table (a new list with the same ids), the same length, and incref once per table entry.
        Allocates and copies nothing: copy-on-write happens later, lazily, in `reserve`.
        Forking an empty sequence gives an empty sequence.
        """
        raise NotImplementedError("TODO Part 4: PagedSequence.fork")


def paged_step(params, cfg, seqs, chunks):
    """Advance each sequence seqs[i] by chunks[i] and return one logits array [len(chunks[i]),
    cfg.vocab] per sequence, in order.

    A chunk is a 1-D list or array of token ids (Python or numpy integers): a prefill of many
    tokens or a decode of one. The logits must equal transformer_lab.forward with a contiguous
    KVCache that saw the same tokens, to 1e-10.

    In this order:
      1. Validate everything, raising ValueError before anything changes (and before any
         MemoryError): len(seqs) != len(chunks); an empty chunk; a token outside
         [0, cfg.vocab) (negative included); a sequence whose length would pass cfg.max_len
         (reaching it exactly is fine). paged_step(params, cfg, [], []) returns [].
      2. Count the blocks the whole step needs (new blocks of every sequence plus copy-on-write
         copies) and compare with pool.n_free: if it does not fit, MemoryError and nothing has
         changed (tables, lengths, refcounts, n_used, n_copies, peak_used). The count must be
         exact: a step that fits must not fail. n sequences in the step that share one partly
         filled last block need n - 1 copies if nobody else holds it (the last one to reserve
         finds refcount 1 and writes in place); in general min(n, refcount - 1).
      3. For each sequence, in list order: reserve(len(chunk)); then, with start = seq.length,
         x = embed(params, cfg, chunk, start); for every layer: q, k, v = qkv(...);
         seq.write(layer, start, k, v); K, V = seq.read(layer, start + T);
         x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start)); then
         seq.length = start + T (once, after all layers) and logits = unembed(params, cfg, x).
    """
    raise NotImplementedError("TODO Part 2: paged_step")


# ====================================================== Part 3: blockwise attention (eq. 4)
def blockwise_attention(q, seq, layer):
    """One query q [H, Dh] attends to all seq.length positions of `layer`; returns out [H, Dh].

    It must equal attention_core(q[None, None], K, V, seq.length - 1)[0, 0] to 1e-12, where K, V
    are the sequence's gathered keys and values, but computed the way the PagedAttention kernel
    does (paper eq. 4), one block at a time:
      - for i in range(ceil(length / B)): b = seq.blocks[i]; m = the number of filled slots of
        that block (B, except possibly for the last one); scores_i = (K_b[:m] . q) / sqrt(Dh),
        K_b = seq.pool.k[layer, b] (a list of per-block scores is fine);
      - ONE softmax over all positions of all blocks (global max, global sum: not per block);
      - out = sum over blocks of (softmax weights of block i) @ seq.pool.v[layer, b][:m].

    Read only seq.pool.k, seq.pool.v, seq.pool.block_size, seq.pool.cfg, seq.blocks and
    seq.length; call no method of seq or of the pool (the tests pass a plain object with just
    these attributes). Do not build the whole [length, H, Dh] K or V: no seq.read, no
    concatenating or fancy-indexing all blocks at once. Entries of seq.blocks beyond the first
    ceil(length / B), and unfilled slots of the last block, must not be read.
    seq.length < 1: ValueError.
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

          1. Errors first, nothing changed: len(blocks) < len(tokens) // B, or a free or invalid id
             among the blocks step 2 would cache -> ValueError.
          2. For each full block i (i < len(tokens) // B) whose key is not cached yet: cache
             blocks[i] under that key and pool.incref it, unless blocks[i] already caches another
             key (then skip it).
          3. Recency: the cached block of every full block i of `tokens` (cached in step 2 or
             before; possibly another physical block than blocks[i]) becomes the most recently
             used, from the deepest block down to block 0: block 0 ends newest, the deepest block
             of this chain oldest among them.
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
