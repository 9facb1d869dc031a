"""The assignment's parts and checks: the one list every tool reads.

The grader's rubric (grader/rubric.py is a view of this file), the sandbox's contract names and
part numbers, labtool's checks of a file (make test / make submit), the public tests' markers and
per-part summary, the selftest's part lists, the handout build's bonus stripping and the grading
tables of both editions (tools/tables.py writes them) all come from here. It ships with the public
tests, so students' tools, the grader and Gradescope read the same list. Standard library only,
Python 3.9+ (the handout's floor), no project imports: it is also copied into the sandbox.

Changing a check's points is its one line below (then `python tools/tables.py` rewrites the tables).
"""
from collections import namedtuple

# A contract name: kind "class" (args: __init__'s), "method" ("Class.meth"), "function",
# "reexport" (a lab function the starter imports; args unused) or "property" (only a stub's entry
# point, for telling a bonus left as the starter's stubs; not looked up by the checks). args
# exclude self.
Name = namedtuple("Name", "kind dotted args")
# A part. id: its pytest marker, check-id prefix and Gradescope tag; title(_zh): its section's
# title without "Part N: "; summary(_zh): its row of the assignment's first table; names: the
# contract names it owns, in the order problems are reported (the top-level ones first for a bonus:
# a file without any of them has not attempted it); test_file: its public tests in tests/ (its
# hidden suite in grader/hidden/ has the same name).
Part = namedtuple("Part", "id number title title_zh summary summary_zh bonus names test_file")
Check = namedtuple("Check", "id part points title title_zh")
REEXPORTED_FROM = "decoding"     # the module the starter imports the reexports from


def _part(pid, number, title, title_zh, summary, summary_zh, names, bonus=False):
    return Part(pid, number, title, title_zh, summary, summary_zh, bonus, tuple(Name(*n) for n in names),
                f"test_{pid}.py")


PARTS = (
    _part("allocator", 1, "the block allocator", "块分配器",
          "a refcounted pool, lowest free block first", "带引用计数的块池，先分配编号最小的空闲块",
          [("class", "BlockPool", ("cfg", "n_blocks", "block_size")), ("method", "BlockPool.alloc", ()),
           ("method", "BlockPool.incref", ("b",)), ("method", "BlockPool.decref", ("b",)),
           ("method", "BlockPool.refcount", ("b",)), ("method", "BlockPool.copy_block", ("b",))]),
    _part("paged_step", 2, "paged KV and the paged step", "分页 KV 与分页步",
          "K/V written and read through block tables, all or nothing", "K/V 经过块表写入和读出，全做或全不做",
          [("class", "PagedSequence", ("pool",)), ("method", "PagedSequence.reserve", ("n",)),
           ("method", "PagedSequence.write", ("layer", "start", "k", "v")),
           ("method", "PagedSequence.read", ("layer", "length")), ("method", "PagedSequence.free", ()),
           ("function", "paged_step", ("params", "cfg", "seqs", "chunks"))]),
    _part("blockwise_attention", 3, "blockwise attention", "按块注意力",
          "the paper's eq. 4, one block at a time", "论文的式 4，一次一个块",
          [("function", "blockwise_attention", ("q", "seq", "layer"))]),
    _part("copy_on_write", 4, "sharing and copy-on-write", "共享与写时复制",
          "fork, lazy copies, parallel sampling and beam search", "fork、延迟复制、并行采样和束搜索",
          [("method", "PagedSequence.fork", ()), ("reexport", "beam_search", ()),
           ("reexport", "parallel_sample", ())]),
    _part("prefix_cache", 5, "shared prefix across requests", "跨请求共享前缀",
          "a prefix cache shared across requests", "跨请求共享的前缀缓存",
          [("class", "PrefixCache", ("pool",)), ("function", "cached_prefill", ("params", "cfg", "seq", "prompt", "cache")),
           ("method", "PrefixCache.lookup", ("tokens",)), ("method", "PrefixCache.insert", ("tokens", "blocks")),
           ("method", "PrefixCache.evict", ("n",)), ("property", "PrefixCache.n_cached", ())], bonus=True),
    _part("swap", 6, "preemption by swapping", "通过换出实现抢占",
          "a preempted group's blocks swapped to CPU blocks and back, sharing kept",
          "被抢占的组的块换出到 CPU 块再换回，共享保持不变",
          [("class", "SwapSpace", ("pool", "n_blocks")), ("method", "SwapSpace.swap_out", ("seqs",)),
           ("method", "SwapSpace.swap_in", ("handle",)), ("property", "SwapSpace.n_free", ())], bonus=True),
)

# Every check: (part, check, points, English title, Chinese title), grouped by part, in the order
# of the grading tables and the reports.
_CHECKS = [
    ("allocator", "layout", 3, "new pool: attributes, storage shape, dtype and zeros, for any Config",
     "新建的池：属性、存储形状、dtype 和全零，任意 Config"),
    ("allocator", "lowest_free_first", 5, "alloc and copy_block take the lowest free block, also after frees",
     "alloc 和 copy_block 取编号最小的空闲块，释放之后也是"),
    ("allocator", "refcounts", 4, "incref / decref / refcount, n_used and n_free",
     "incref / decref / refcount、n_used 和 n_free"),
    ("allocator", "peak_used", 2, "peak_used is the largest n_used ever reached", "peak_used 是 n_used 到达过的最大值"),
    ("allocator", "exhaustion", 3, "alloc on a full pool: MemoryError, pool unchanged", "池满时 alloc：MemoryError，池不变"),
    ("allocator", "bad_ids", 3, "bad or free block ids: ValueError, pool unchanged", "不合法或空闲的块编号：ValueError，池不变"),
    ("allocator", "copy_block", 3, "copy_block: a new block, source refcount unchanged, n_copies, full pool",
     "copy_block：新块、源块的引用计数不变、n_copies、池满"),
    ("allocator", "random_ops", 2, "long random operation sequences: same state as the reference",
     "很长的随机操作序列：状态与参考实现相同"),

    ("paged_step", "prefill", 3, "prefill logits equal the contiguous forward", "prefill 的 logits 等于连续的 forward"),
    ("paged_step", "chunked_prefill", 3, "a prompt fed in chunks equals one-shot prefill",
     "分成几个 chunk 输入的提示等于一次 prefill"),
    ("paged_step", "decode_batches", 3,
     "decode steps and mixed batches: logits (computed from pool storage) and lengths",
     "decode 步和混合的批次：logits（由池的存储算出）和长度"),
    ("paged_step", "tables", 4, "block tables up to renaming (a block exactly when needed, in list order), K/V stored "
                                "and read through them, on a used pool",
     "块表（编号可以不同：恰好在需要时分配块，按列表顺序），经块表存取的 K/V，在用过的池上"),
    ("paged_step", "configs", 3, "other Configs and block sizes from 1 to 64: logits, tables up to renaming, K/V",
     "别的 Config 和从 1 到 64 的块大小：logits、块表（编号可以不同）、K/V"),
    ("paged_step", "all_or_nothing", 4, "a step or reserve that does not fit: MemoryError, nothing changed",
     "放不下的步或 reserve：MemoryError，什么都不变"),
    ("paged_step", "exact_count", 3, "a step that needs exactly the free blocks succeeds (copies counted)",
     "所需块数恰好等于空闲块数的步会成功（复制也算在内）"),
    ("paged_step", "bad_input", 3, "bad input: ValueError before anything changes", "错误输入：在任何改动之前抛出 ValueError"),
    ("paged_step", "replays", 4, "steps on sequences as forks and cache hits leave them (the runs other checks compare "
                                 "yours with): logits, lengths and K/V",
     "在 fork 和缓存命中留下的序列上运行的步（其他检查拿来与你的运行比较的那些运行）：logits、长度和 K/V"),

    ("blockwise_attention", "boundaries", 5, "lengths k*B-1, k*B and k*B+1", "长度 k*B-1、k*B 和 k*B+1"),
    ("blockwise_attention", "tables_layers", 5, "non-monotone block tables, every layer", "非单调的块表，每一层"),
    ("blockwise_attention", "configs", 4, "other Configs and block sizes", "别的 Config 和块大小"),
    ("blockwise_attention", "empty", 1, "length 0: ValueError", "长度 0：ValueError"),

    ("copy_on_write", "fork", 4, "fork shares the whole table: same blocks and length, each refcount + 1",
     "fork 共享整张块表：相同的块和长度，每个引用计数 + 1"),
    ("copy_on_write", "copy_when_needed", 5, "copy-on-write exactly when the last block is partly filled and shared",
     "恰好在最后一块未满且被共享时写时复制"),
    ("copy_on_write", "n_minus_1", 3, "n holders of a partly filled block writing make n - 1 copies",
     "未满块的 n 个持有者写入时复制 n - 1 次"),
    ("copy_on_write", "copied_data", 5, "K/V stored by the test read back through the tables after forks, copies and frees",
     "测试存入的 K/V 在 fork、复制和 free 之后经块表读回"),
    ("copy_on_write", "free", 4, "free gives every block back (refcount - 1); a freed sequence can be reused",
     "free 归还每个块（引用计数 - 1）；释放后的序列可以再用"),
    ("copy_on_write", "sharing_invariance", 2, "sharing changes no result: the same logits and K/V as without sharing",
     "共享不改变任何结果：logits 和 K/V 与不共享时相同"),
    ("copy_on_write", "parallel_sampling", 4,
     "parallel sampling: prompt blocks shared, n - 1 copies, no leak, savings within range",
     "并行采样：提示的块被共享，复制 n - 1 次，没有泄漏，节省量在范围内"),
    ("copy_on_write", "beam_search", 3, "beam search: no leak, sharing never costs blocks, beams and savings within range",
     "束搜索：没有泄漏，共享从不多用块，束和节省量在范围内"),

    ("prefix_cache", "hits", 2, "cached_prefill: the blocks it hits (named by what they were made for), tokens computed, "
                                "n_hit_tokens, the lookup cap",
     "cached_prefill：命中的块（按来历称呼）、计算的 token 数、n_hit_tokens、lookup 的上限"),
    ("prefix_cache", "keys", 2, "lookup and insert: whole-prefix keys (a block after another prefix misses), insert's "
                                "count, the blocks cached",
     "lookup 和 insert：以整个前缀为键（跟在别的前缀后面的块不命中）、insert 返回的块数、被缓存的块"),
    ("prefix_cache", "logits", 2, "cached prefill logits equal your own prefill without the cache, also after the test "
                                  "overwrote a hit block",
     "带缓存的 prefill 的 logits 等于你自己不用缓存的 prefill，测试改写了命中的块之后也是"),
    ("prefix_cache", "eviction", 2, "evict: which blocks stay cached (least recently used first, tail first, no "
                                    "cascade, held blocks kept) and its count",
     "evict：哪些块留在缓存里（最近最少使用的先淘汰、从尾部开始、不连锁、被持有的块保留）以及它返回的块数"),
    ("prefix_cache", "exhaustion", 1, "a full pool: cached_prefill evicts exactly the shortfall, never a hit; else "
                                      "MemoryError, nothing changed",
     "池满：cached_prefill 恰好淘汰差额，绝不淘汰命中的块；否则 MemoryError，什么都不变"),
    ("prefix_cache", "errors", 1, "bad calls of cached_prefill, insert and evict: ValueError, nothing changed",
     "错误地调用 cached_prefill、insert 和 evict：ValueError，什么都不变"),

    ("swap", "layout", 1, "a new SwapSpace: attributes, CPU storage shape, dtype and zeros, n_free and the counters, for "
                          "any Config",
     "新建的 SwapSpace：属性、CPU 存储的形状、dtype 和全零、n_free 和计数器，任意 Config"),
    ("swap", "swap_out", 1, "swap_out: each distinct block copied once (n_out, n_free), every table entry given back "
                            "once, the group left empty",
     "swap_out：每个不同的块只复制一次（n_out、n_free），每个块表条目归还一次，整组变空"),
    ("swap", "swap_in", 1, "swap_in: tables of the same shape (shared blocks shared again), lengths, the test's K/V "
                           "read back, blocks taken in order of first appearance, n_in",
     "swap_in：形状相同的块表（共享过的块重新共享）、长度、读回测试存入的 K/V、按首次出现的顺序取块、n_in"),
    ("swap", "all_or_nothing", 1, "a group that does not fit (the CPU blocks, or the pool's on swap_in): MemoryError, "
                                  "nothing changed, the handle still good",
     "放不下的组（CPU 块不够，或 swap_in 时池的块不够）：MemoryError，什么都不变，句柄仍然有效"),
    ("swap", "errors", 1, "bad calls of swap_out and swap_in (an empty, repeated or foreign group, a handle used or not "
                          "this space's): ValueError, nothing changed",
     "错误地调用 swap_out 和 swap_in（空的、重复的或别的池的组，用过的或不是这个空间的句柄）：ValueError，什么都不变"),
]

CHECKS = {f"{part}.{cid}": Check(f"{part}.{cid}", part, points, title, title_zh)
          for part, cid, points, title, title_zh in _CHECKS}
BY_ID = {p.id: p for p in PARTS}


# ------------------------------------------------------------------------------------- views
def core():
    """The parts of the 100 points, in order."""
    return tuple(p for p in PARTS if not p.bonus)


def bonus():
    """The extra-credit parts, in order."""
    return tuple(p for p in PARTS if p.bonus)


def number(part_id):
    return BY_ID[part_id].number


def section(part_id, zh=False):
    """The heading of the part's section in the assignment (the feedback points students to it)."""
    p = BY_ID[part_id]
    if zh:
        return f"Part {p.number}{'（加分题）' if p.bonus else ''}：{p.title_zh}"
    return f"Part {p.number}{' (bonus)' if p.bonus else ''}: {p.title}"


def todo_prefix(part_id):
    """What the starter's stubs of the part raise: NotImplementedError("TODO Part N: ...")."""
    return f"TODO Part {number(part_id)}"


def names(parts):
    """The dotted contract names of these parts, in order: what must exist (properties aside)."""
    return tuple(n.dotted for p in parts for n in p.names if n.kind != "property")


def top_names(part_id):
    """The part's top-level names (classes, functions): a file without any has not attempted it."""
    return tuple(n.dotted for n in BY_ID[part_id].names if n.kind in ("class", "function"))


def checks_of(part_id):
    return [c for c in CHECKS.values() if c.part == part_id]


def points(part_id):
    return sum(c.points for c in checks_of(part_id))


def _validate():
    """A registry that cannot be right does not load: numbers 1..n in order, a check's part
    registered, every part with checks, unique ids and titles, points positive whole numbers."""
    assert [p.number for p in PARTS] == list(range(1, len(PARTS) + 1)), "parts are numbered 1..n in order"
    assert all(not a.bonus or b.bonus for a, b in zip(PARTS, PARTS[1:])), "bonus parts come last"
    assert len(CHECKS) == len(_CHECKS), "two checks have the same id"
    for c in CHECKS.values():
        assert c.part in BY_ID, f"{c.id}: no part {c.part!r}"
        assert type(c.points) is int and c.points > 0, f"{c.id}: points must be a positive int"
        assert c.title and c.title_zh, f"{c.id}: a title in both languages"
    order = [c.part for c in CHECKS.values()]
    assert order == sorted(order, key=number), "checks are grouped by part, in the parts' order"
    for p in PARTS:
        assert checks_of(p.id), f"part {p.id} has no check"
        assert p.names, f"part {p.id} owns no contract name"
    for field in ("title", "title_zh"):
        titles = [getattr(c, field) for c in CHECKS.values()]
        assert len(set(titles)) == len(titles), f"two checks have the same {field}"


_validate()
