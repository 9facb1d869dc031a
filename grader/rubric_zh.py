"""The Chinese title of every rubric check, for assignment.zh-CN.md's grading tables.

Points and parts live in rubric.py only; this file holds words. checks/test_handout_sync.py
demands a title here for every check of the rubric, bonus checks included (whether or not
rubric.BONUS switches them on), and the Chinese grading tables (Parts 1-4, then the extra-credit
one) equal to these titles, in the rubric's order, with the rubric's parts and points. A new check
needs its line here and its row in both editions.
"""

TITLES = {
    "allocator.layout": "新建的池：属性、存储形状、dtype 和全零，任意 Config",
    "allocator.lowest_free_first": "alloc 和 copy_block 取编号最小的空闲块，释放之后也是",
    "allocator.refcounts": "incref / decref / refcount、n_used 和 n_free",
    "allocator.peak_used": "peak_used 是 n_used 到达过的最大值",
    "allocator.exhaustion": "池满时 alloc：MemoryError，池不变",
    "allocator.bad_ids": "不合法或空闲的块编号：ValueError，池不变",
    "allocator.copy_block": "copy_block：新块、源块的引用计数不变、n_copies、池满",
    "allocator.random_ops": "很长的随机操作序列：状态与参考实现相同",

    "paged_step.prefill": "prefill 的 logits 等于连续的 forward",
    "paged_step.chunked_prefill": "分成几个 chunk 输入的提示等于一次 prefill",
    "paged_step.decode_batches": "decode 步和混合的批次：logits（由池的存储算出）和长度",
    "paged_step.tables": "块表（编号可以不同：恰好在需要时分配块，按列表顺序），经块表存取的 K/V，在用过的池上",
    "paged_step.configs": "别的 Config 和从 1 到 64 的块大小：logits、块表（编号可以不同）、K/V",
    "paged_step.all_or_nothing": "放不下的步或 reserve：MemoryError，什么都不变",
    "paged_step.exact_count": "所需块数恰好等于空闲块数的步会成功（复制也算在内）",
    "paged_step.bad_input": "错误输入：在任何改动之前抛出 ValueError",

    "blockwise_attention.boundaries": "长度 k*B-1、k*B 和 k*B+1",
    "blockwise_attention.tables_layers": "非单调的块表，每一层",
    "blockwise_attention.configs": "别的 Config 和块大小",
    "blockwise_attention.empty": "长度 0：ValueError",

    "copy_on_write.fork": "fork 共享整张块表：相同的块和长度，每个引用计数 + 1",
    "copy_on_write.copy_when_needed": "恰好在最后一块未满且被共享时写时复制",
    "copy_on_write.n_minus_1": "未满块的 n 个持有者写入时复制 n - 1 次",
    "copy_on_write.copied_data": "测试存入的 K/V 在 fork、复制和 free 之后经块表读回",
    "copy_on_write.free": "free 归还每个块（引用计数 - 1）；释放后的序列可以再用",
    "copy_on_write.sharing_invariance": "共享不改变任何结果：logits 和 K/V 与不共享时相同",
    "copy_on_write.parallel_sampling": "并行采样：提示的块被共享，复制 n - 1 次，没有泄漏，节省量在范围内",
    "copy_on_write.beam_search": "束搜索：没有泄漏，共享从不多用块，束和节省量在范围内",

    "prefix_cache.hits": "cached_prefill：命中的块（按来历称呼）、计算的行数、n_hit_tokens、lookup 的上限",
    "prefix_cache.keys": "lookup 和 insert：以整个前缀为键（跟在别的前缀后面的块不命中）、insert 返回的块数、被缓存的块",
    "prefix_cache.logits": "带缓存的 prefill 的 logits 等于你自己不用缓存的 prefill，测试改写了命中的块之后也是",
    "prefix_cache.eviction": "evict：哪些块留在缓存里（最近最少使用的先淘汰、从尾部开始、不连锁、被持有的块保留）以及它返回的块数",
    "prefix_cache.exhaustion": "池满：cached_prefill 恰好淘汰差额，绝不淘汰命中的块；否则 MemoryError，什么都不变",
    "prefix_cache.errors": "错误地调用 cached_prefill、insert 和 evict：ValueError，什么都不变",
}
