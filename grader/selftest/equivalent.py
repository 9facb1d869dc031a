"""Generated mutants judged equivalent by reading them: they change only behaviour the contract does not
grade ("What is not graded": wrong-type inputs, error wording, views vs copies; assignment.md's
"n_blocks < 1 or block_size < 1: ValueError (not graded)") or nothing at all, so no grader can kill
them. Strict: a mutant is listed only when the graded behaviour cannot differ, with the reason in one
line; one that differs only in a situation the contract may leave open (a bare reserve before a step)
is not listed: it stays a survivor for the staff to decide. A listed mutant the grader kills is
reported (proofs.summary: equivalent_but_killed), so a wrong entry shows up.

EQUIVALENT: the reference's (python -m grader.selftest.generate); VARIANTS: {variant: {name: why}}.
"""
_NUMPY = "only a numpy integer given stays one (the tests accept numpy ids, the answers cross the wire as ints); "
_WRONG_TYPE = "bools, floats and other non-integers: wrong-type inputs, not graded"
_SIZES = "n_blocks < 1 or block_size < 1: ValueError not graded (assignment.md, Part 1)"
_EMPTY = ("an empty chunk still raises ValueError before anything changes (a list's float dtype, numpy's min() of an "
          "empty int array); only a 2-D chunk gets through: a wrong type, not graded")
_OBJECT = ("the clamp only sees object arrays (an int beyond int64, a non-integer), each of which is still rejected: "
           "every element is clamped to -1 or past the vocabulary")
_SYMMETRIC = "max/min of two ints with its arguments swapped: the same value"
_ONE_POOL = "in every test all sequences of one step share one pool (assignment.md, Part 2): "

EQUIVALENT = {
    "_as_int:+1:cmp:0": _NUMPY + "a Python int takes the general path to int(x), itself",
    "_as_int:+3:bool:0": "accepts bools and floats as ids, tokens, n: " + _WRONG_TYPE,
    "_as_int:+4:drop:0": "returns int(x) for any x: " + _WRONG_TYPE,
    "BlockPool.__init__:+1:drop:0": _NUMPY + "a non-integer n_blocks is not graded",
    "BlockPool.__init__:+2:drop:0": _NUMPY + "a non-integer block_size is not graded",
    "BlockPool.__init__:+3:const:1": _SIZES,
    "BlockPool.__init__:+3:bool:0": _SIZES,
    "BlockPool.__init__:+3:const:3": _SIZES,
    "BlockPool.__init__:+4:drop:0": _SIZES,
    "BlockPool._in_use:+1:drop:0": _NUMPY + "a decref'd numpy id may come back from alloc as one; " + _WRONG_TYPE,
    "BlockPool.alloc:+6:swap:0": _SYMMETRIC,
    "BlockPool.refcount:+1:drop:0": _NUMPY + _WRONG_TYPE,
    "PagedSequence._new_blocks:+1:swap:0": _SYMMETRIC,
    "PagedSequence.reserve:+1:drop:0": _NUMPY + _WRONG_TYPE,
    "_check_chunk:+2:bool:0": _EMPTY,
    "_check_chunk:+2:const:3": _EMPTY,
    "_check_chunk:+3:drop:0": _EMPTY,
    "_check_chunk:+4:cmp:0": "every int array is clamped too (its in-range tokens unchanged, the others still out of range), "
                             "an object array then fails the dtype check: the same verdicts",
    "_check_chunk:+5:drop:0": "an object array (an int beyond int64, a non-integer) fails the dtype check instead: "
                              "ValueError all the same",
    "_check_chunk:+5:maxmin:0": _OBJECT,
    "_check_chunk:+5:swap:0": _OBJECT,
    "_check_chunk:+5:maxmin:1": _OBJECT,
    "_check_chunk:+5:swap:1": _OBJECT,
    "_check_chunk:+5:const:1": _OBJECT + " (to -2 here)",
    "_check_chunk:+7:drop:0": "a float or bool array gets through: " + _WRONG_TYPE,
    "_blocks_needed:+12:swap:0": _SYMMETRIC,
    "paged_step:+2:drop:0": "seqs and chunks index, zip and len the same as lists or tuples; chunks is rebuilt as a list "
                            "below",
    "paged_step:+16:index:3": "every sequence of a group shares the group's pool (id(pool) is in its key)",
    "paged_step:+16:drop:0": _ONE_POOL + "the last pool counted is the group's",
    "paged_step:+16:index:1": _ONE_POOL + "the sequence before the group's first (or the last) is of the same pool",
    "groups_across_pools": _ONE_POOL + "batching by position alone groups the same sequences",
    "_check_chunk:+5:const:0": "only a Python int token below int64's range is accepted (as token 0): too large for "
                               "int64, not graded (What is not graded; a solution converting with numpy raises "
                               "OverflowError there)",
    "blockwise_attention:+3:const:1": "length 0 still raises ValueError: numpy's max() of no blocks' scores",
    "blockwise_attention:+4:drop:0": "length 0 still raises ValueError: numpy's max() of no blocks' scores",
    "blockwise_attention:+7:swap:0": _SYMMETRIC,
    "PrefixCache.insert:+5:slice:0": "the table's entries past its full blocks are only checked for being distinct "
                                     "integers, as a sequence's table is; a block twice in one insert is not graded",
    "PrefixCache.insert:+5:slice:1": "the table's entries past its full blocks are only checked for being distinct "
                                     "integers, as a sequence's table is; a block twice in one insert is not graded",
    "PrefixCache.insert:+7:drop:0": "a block id twice in one insert is not graded (What is not graded, Part 5)",
    "PrefixCache.evict:+2:drop:0": "evict(-1) still raises ValueError; only a non-integer n differs: " + _WRONG_TYPE,
    "cached_prefill:+6:drop:0": "lookup checks the prompt by the same rules on an empty sequence before anything "
                                "changes, and an empty prompt fails in paged_step before anything changes",
    "cached_prefill:+14:swap:0": _SYMMETRIC,
    "SwapSpace.__init__:+1:drop:0": _NUMPY + "a non-integer n_blocks is not graded",
    "SwapSpace.__init__:+2:const:1": "SwapSpace(pool, 0) accepted: n_blocks < 1 is not graded (What is not graded, "
                                     "Part 6)",
    "SwapSpace.__init__:+3:drop:0": "SwapSpace(pool, 0) accepted (a negative n_blocks still fails in np.zeros): "
                                    "n_blocks < 1 is not graded (What is not graded, Part 6)",
    "SwapSpace.swap_out:+2:drop:0": "swap_out is given a list (anything else is not graded, Part 6); list() only "
                                    "copies it, and the group is not changed before it is read",
    "SwapSpace.swap_in:+5:drop:0": "only a handle that cannot be a dict key raises another error (UnboundLocalError): "
                                   "not graded (What is not graded, Part 6)",
    "SwapSpace.swap_out:+10:const:1": "the CPU blocks are taken from the other end of the free list: which CPU block "
                                      "holds what is not observed (the contract, Part 6), only n_free, n_out, n_in "
                                      "and what comes back",
}

VARIANTS = {
    "plain_loops": {
        "_is_int:+1:bool:0": "accepts every non-bool and bools too as integers: " + _WRONG_TYPE,
        "BlockPool.__init__:+1:bool:0": "a non-integer n_blocks or block_size may pass: " + _WRONG_TYPE + "; " + _SIZES,
        "BlockPool.__init__:+1:bool:1": "a non-integer n_blocks or block_size may pass: " + _WRONG_TYPE + "; " + _SIZES,
        "BlockPool.__init__:+1:const:1": _SIZES,
        "BlockPool.__init__:+1:bool:2": _SIZES,
        "BlockPool.__init__:+1:const:3": _SIZES,
        "BlockPool.__init__:+2:drop:0": _SIZES + "; " + _WRONG_TYPE,
        "BlockPool._check:+2:drop:0": "a non-integer id gets through the type check: " + _WRONG_TYPE,
        "BlockPool._check:+3:drop:0": _NUMPY + "the dict of refcounts hashes it as the int",
        "BlockPool.alloc:+5:cmp:0": "peak_used set to n_used when they are equal: the same value",
        "PagedSequence._cow_due:+1:const:3": "a sequence with a partly filled block has a table (len 0 never meets a "
                                             "partial block between steps)",
        "PagedSequence._cow_due:+2:return:0": "None instead of False: `1 if None else 0` is 0 all the same",
        "PagedSequence._missing:+2:swap:0": _SYMMETRIC,
        "_tokens:+3:drop:0": "a 2-D chunk's rows are lists, rejected by the integer check below; 2-D is not graded",
        "_tokens:+9:drop:0": "a non-integer token gets through: " + _WRONG_TYPE,
        "_tokens:+10:drop:0": _NUMPY + "np.array of the tokens is the same",
        "paged_step:+1:drop:0": "seqs indexes, zips and lens the same as a list or a tuple",
        "paged_step:+2:drop:0": "chunks indexes, zips and lens the same as a list or a tuple",
        "blockwise_attention:+3:const:1": "length 0 still raises ValueError: max() of no blocks' scores",
        "blockwise_attention:+4:drop:0": "length 0 still raises ValueError: max() of no blocks' scores",
    },
    "batched_dataclass": {
        "_whole:+1:bool:0": "accepts bools and floats as integers: " + _WRONG_TYPE,
        "_whole:+2:drop:0": "returns int(x) for any x: " + _WRONG_TYPE,
        "BlockPool:-1:const:0": "pools compare by their fields and are unhashable: the contract never compares or "
                                "hashes a pool (the tests key pools by id)",
        "BlockPool:+4:const:2": "n_copies becomes an optional fourth constructor argument, default 0: BlockPool(cfg, "
                                "n, B) is the same",
        "BlockPool:+5:const:2": "peak_used becomes an optional constructor argument, default 0: BlockPool(cfg, n, B) is "
                                "the same",
        "BlockPool:+6:drop:0": "k is no dataclass field (eq=False: only repr changes); __post_init__ sets it all the same",
        "BlockPool:+6:const:1": "repr only",
        "BlockPool:+7:drop:0": "v is no dataclass field (eq=False: only repr changes); __post_init__ sets it all the same",
        "BlockPool:+7:const:1": "repr only",
        "BlockPool:+8:drop:0": "_refs is no dataclass field (eq=False: only repr changes); __post_init__ sets it",
        "BlockPool:+8:const:1": "repr only",
        "BlockPool.__post_init__:+1:drop:0": _NUMPY + "a non-integer n_blocks is not graded",
        "BlockPool.__post_init__:+2:drop:0": _NUMPY + "a non-integer block_size is not graded",
        "BlockPool.__post_init__:+3:const:1": _SIZES,
        "BlockPool.__post_init__:+3:bool:0": _SIZES,
        "BlockPool.__post_init__:+3:const:3": _SIZES,
        "BlockPool.__post_init__:+4:drop:0": _SIZES,
        "BlockPool._id:+1:drop:0": _NUMPY + "alloc finds ids with list.index, so it still hands out ints; " + _WRONG_TYPE,
        "BlockPool.alloc:+6:swap:0": _SYMMETRIC,
        "PagedSequence._more:+2:swap:0": _SYMMETRIC,
        "PagedSequence.reserve:+1:drop:0": _NUMPY + _WRONG_TYPE,
        "_ids:+2:bool:0": _EMPTY,
        "_ids:+3:drop:0": _EMPTY,
        "_ids:+5:cmp:0": "an object array (an int beyond int64, a non-integer) is rejected outright with ValueError, as "
                         "the contract wants; a float or bool array fails _whole: ValueError all the same",
        "_ids:+6:drop:0": "a float or bool array gets through: " + _WRONG_TYPE,
        "_ids:+7:drop:0": "an object array stays one: an int beyond int64 fails the range check (ValueError), a "
                          "non-integer is a wrong type",
        "_demand:+10:swap:0": _SYMMETRIC,
        "paged_step:+1:drop:0": "seqs indexes, zips and lens the same as a list or a tuple; chunks is rebuilt below",
        "blockwise_attention:+2:const:1": "length 0 still raises ValueError: numpy's max() of no blocks' scores",
        "blockwise_attention:+3:drop:0": "length 0 still raises ValueError: numpy's max() of no blocks' scores",
        "blockwise_attention:+7:swap:0": _SYMMETRIC,
    },
}


def for_source(name):
    """The table of a source: "solution" or a variant's name."""
    return EQUIVALENT if name == "solution" else VARIANTS.get(name, {})
