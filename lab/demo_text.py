"""Every word lab/demo.py prints, in English and in Chinese (the lecture's own terms).

TEXTS[lang][key] is a string or a list of strings with {named} fields that demo.py fills in. Both
languages have the same keys, the same fields and the same numbers (checks/test_lecture.py): a
figure belongs in a field or in both texts, never in one language only.
"""

EN = {
    "observations": "Observations:",
    "identical": "identical",
    "different": "DIFFERENT",
    "cannot_import": "Cannot import {path}: {error}",
    "not_implemented": "\n  [{demo}] not implemented yet: needs {parts}. ({error})",
    "crashed": "\n  [{demo}] crashed; it uses {parts}:",
    # a bonus demo whose part is not attempted (tools/labtool.py decides, as for make test and make submit)
    "bonus.not_attempted": "\n  [{demo}] bonus not attempted: {why}. Part {n} is extra credit: Parts 1-4 lose nothing.",
    "bonus.absent": "paged_kv.py defines no {names}",
    "bonus.and_no": " and no ",
    "bonus.stubbed": 'its stubs still raise NotImplementedError("TODO Part {n} ...")',
    "bonus.incomplete": "\n  [{demo}] cannot run: paged_kv.py has only some of Part {n}'s names ({problems}).",

    "demo1.parts": "Part 1 (BlockPool) and Part 2 (paged_step)",
    "demo1.title": "Demo 1: how a block table grows (vLLM paper fig. 6: 7-token prompt, block size 4)",
    "demo1.columns": ["step", "block table (logical -> physical)", "tokens written", "last block filled"],
    "demo1.prefill": "prefill 7 tokens",
    "demo1.decode": 'decode: write the KV of "{word}"',
    "demo1.pool": "\nThe pool has {n_blocks} physical blocks; this sequence uses {used}, 2 more are held by other "
                  "(simulated) sequences.",
    "demo1.observations": [
        "Physical block numbers are not contiguous (freed blocks are reused first): logically contiguous KV "
        "is scattered over memory and found again through the block table, like an OS page table.",
        "Prefill allocates only 2 blocks (7 tokens); the first decode fills the last slot of block 2, the "
        "second decode finds it full and allocates a new block. At any moment the waste is at most the "
        "unfilled slots of the last block (< block size).",
    ],

    "demo2.parts": "Part 2 (paged_step) and Part 3 (blockwise_attention)",
    "demo2.title": "Demo 2: paged KV = contiguous KV (TINY, 4 sequences of different lengths, prefill + 20 decodes)",
    "demo2.columns": ["block size", "physical blocks used", "slots allocated", "tokens", "waste in last blocks",
                      "max |paged - contiguous|"],
    "demo2.blockwise": "\nBlockwise attention (paper eq. 4: scores per block, one softmax, V per block) vs "
                       "concatenated: "
                       "max difference {diff} (length {length}, block size 8, {n_blocks} blocks)",
    "demo2.observations": [
        "Whatever the block size, paged KV gives the same logits as contiguous KV to 1e-15: paging changes "
        "only WHERE the KV lives, not what is computed.",
        "Larger blocks waste more in the last block (17% at 16, 38% at 64 for these short sequences); smaller "
        "blocks mean longer block tables and more fragmented reads. vLLM's default is 16.",
        "The real PagedAttention kernel never concatenates blocks: each warp reads one block (paper §5.1) and "
        "computes on it in place, which is the blockwise attention here.",
    ],

    "demo3.parts": "Part 4 (fork and copy-on-write)",
    "demo3.title": "Demo 3: parallel sampling shares the prompt's KV among n samples "
                   "(100-token prompt, 40 new tokens each, temperature 1, block size 16)",
    "demo3.columns": ["samples n", "output vs own KV each", "blocks at last step", "blocks unshared",
                      "blocks saved (avg)", "copy-on-write copies"],
    "demo3.observations": [
        "The n samples share the prompt's 7 blocks (96 of the 100 tokens fill 6 blocks, the 7th holds 4). "
        "Writing into that partly filled block, the first n - 1 samples each trigger one copy-on-write; the "
        "last finds refcount 1 and writes in place, so there are n - 1 copies.",
        "The saving grows with n and depends on prompt and output lengths: the longer the prompt and the "
        "shorter the output, the more is saved. The vLLM paper measured 6.1%-9.8% on Alpaca and "
        "16.2%-30.5% on ShareGPT (fig. 15).",
        "The output is identical to every sample owning its KV: sharing is a pure memory optimisation.",
    ],

    "demo4.parts": "Part 4 (fork and copy-on-write)",
    "demo4.title": "Demo 4: beam search shares prefixes between candidates, vs copying whole caches "
                   "(64-token prompt, 32 steps, block size 16)",
    "demo4.columns": ["beam width k", "k results", "full copy: tokens copied", "paged: tokens copied (CoW)",
                      "blocks saved (avg)", "paged peak blocks"],
    "demo4.observations": [
        "Copying the whole cache (what earlier systems did, says the vLLM paper) copies the parent's entire KV "
        "to every child at every step, growing with length and beam width; paged, only a write into a shared "
        "last block copies one block (16 tokens).",
        "Beam candidates share not only the prompt but the path they walked together: the saving here is far "
        "higher than in demo 3. The vLLM paper measured 37.6%-55.2% (Alpaca) and 44.3%-66.3% (ShareGPT) for "
        "beam search, against 6.1%-30.5% for parallel sampling.",
        "The k results are identical: paging, sharing and copy-on-write do not change the computation.",
    ],

    "demo5.parts": "Parts 1-2, and the bonus Part 5 (PrefixCache, cached_prefill)",
    "demo5.title": "Demo 5: requests sharing a system prompt reuse its cached blocks ({system}-token system prompt "
                   "+ {question}-token question each; prefill one by one, then {steps} decode steps together; "
                   "block size {bs})",
    "demo5.columns": ["requests R", "tokens prefilled: no cache / cache", "cache hit rate",
                      "peak blocks: no cache / cache", "outputs vs no cache", "max |cached - uncached|"],
    "demo5.after": "\nAfter the {R} requests finish, {n_used} blocks are still in use: the cache's own reference on "
                   "the system prompt's blocks {blocks}. evict(1), {n} times, releases blocks {order}: the tail "
                   "of the chain first.",
    "demo5.observations": [
        "The first request computes its whole prompt and leaves the system prompt's {sys_blocks} full blocks in "
        "the cache. Every later request finds them by key (block i's key is the whole prefix up to its end, so "
        "the same tokens after another prefix never match) and computes only its question: R x {prompt} prompt "
        "tokens become {prompt} + (R - 1) x {question}.",
        "The cached blocks are shared like the prompt in demo 3: each is held by the R requests plus one "
        "reference of the cache itself (refcount R + 1), so the peak falls from R x {per_request} blocks to "
        "{sys_blocks} + R x {own}.",
        "Only full blocks are cached, and at least one prompt token is always computed: its logits give the "
        "first output token. Each question's block is partly filled and private to its request; decode writes "
        "there (no copy-on-write: a full block is never written).",
        "paged_step never evicts: before each decode step the demo calls cache.evict for any shortfall of free "
        "blocks (never needed here, the pool has {n_blocks} blocks).",
        "The outputs are identical to the run without the cache: a hit reuses exactly the K/V the request "
        "would have computed. This is the vLLM paper's third kind of sharing (§4.4, a shared prefix across "
        "requests); vLLM's automatic prefix caching and SGLang's RadixAttention do it for every request and "
        "evict cached blocks nobody holds, least recently used first.",
    ],
    "demo6.parts": "Parts 1-2 and 4, and the bonus Part 6 (SwapSpace)",
    "demo6.title": "Demo 6: more requests than the pool holds, served by preempting the latest group (vLLM paper "
                   "§4.5: {R} requests, a {prompt}-token prompt and {n} samples of {new} tokens each; the pool holds "
                   "{slots} token slots, the CPU space as many)",
    "demo6.columns": ["block size B", "pool blocks (an ample pool's peak)", "preemptions", "swapping: blocks out + in",
                      "recomputation: tokens", "steps (ample pool)", "outputs vs ample pool: swap / recompute"],
    "demo6.observations": [
        "An ample pool holds every request at once (its peak in brackets). With {slots} token slots the scheduler admits "
        "requests while their prompt fits and, when a decode step does not fit, preempts the latest group, all of "
        "it: its {n} samples share the prompt's blocks, so a group is swapped or recomputed as one.",
        "Swapping moves blocks: many small ones at small block sizes (the paper's Fig. 19 measures how the cost of "
        "each transfer makes swapping small blocks slow), a few large ones at large sizes. Recomputation moves "
        "nothing: it computes the group's tokens again (its prompt and what its samples had) in one prefill, which "
        "a GPU does fast; how many depends on how many groups were preempted and how far they had got.",
        "Both ways give the outputs of the ample pool: a resumed group goes on from exactly the K/V it had (swapped "
        "blocks come back shared as they were, recomputed ones are computed again), and each sample's random draws "
        "depend only on its request, sample and position.",
        "Preempted groups come back first come first served, before any new request is admitted: preemption "
        "delays requests but starves none. Its cost shows in the steps: fewer requests run at once.",
    ],
}

ZH = {
    "observations": "观察：",
    "identical": "相同",
    "different": "不同",
    "cannot_import": "无法导入 {path}：{error}",
    "not_implemented": "\n  [{demo}] 还没有实现：需要 {parts}。（{error}）",
    "crashed": "\n  [{demo}] 运行出错；它用到 {parts}：",
    "bonus.not_attempted": "\n  [{demo}] 加分题未做：{why}。Part {n} 是额外加分：Part 1-4 不受任何影响。",
    "bonus.absent": "paged_kv.py 没有定义 {names}",
    "bonus.and_no": "，也没有定义 ",
    "bonus.stubbed": '它的桩函数仍在抛出 NotImplementedError("TODO Part {n} ...")',
    "bonus.incomplete": "\n  [{demo}] 无法运行：paged_kv.py 只有 Part {n} 的一部分名字（{problems}）。",

    "demo1.parts": "Part 1（BlockPool）和 Part 2（paged_step）",
    "demo1.title": "演示 1：块表怎样随 decode 增长（vLLM 论文图 6：7 个 token 的提示，块大小 4）",
    "demo1.columns": ["这一步", "块表（逻辑块 → 物理块）", "已写入的 token", "最后一块填了"],
    "demo1.prefill": "prefill 7 个 token",
    "demo1.decode": "decode：写入“{word}”的 KV",
    "demo1.pool": "\n池里共有 {n_blocks} 个物理块：这个序列占了 {used} 个，另有 2 个被别的（模拟的）序列占着。",
    "demo1.observations": [
        "物理块的编号并不连续（刚释放的块先被再分配）：逻辑上连续的 KV 散落在显存各处，靠块表找回来，"
        "和操作系统的页表是一个道理。",
        "prefill 只分配了 2 个块（7 个 token）；第一次 decode 写进物理块 2 剩下的最后一个槽位，第二次 decode "
        "发现它已写满，这才分配新块。任何时刻浪费的最多只是最后一块里还空着的槽位（< 块大小）。",
    ],

    "demo2.parts": "Part 2（paged_step）和 Part 3（blockwise_attention）",
    "demo2.title": "演示 2：分页的 KV = 连续的 KV（TINY 模型，4 个长短不一的序列，prefill 加 20 步 decode）",
    "demo2.columns": ["块大小", "用掉的物理块", "分配的槽位", "实际 token 数", "最后一块的浪费", "与连续 KV 的最大差"],
    "demo2.blockwise": "\n按块注意力（论文式 4：逐块算分数、对所有位置做一次 softmax、逐块乘 V）对比拼起来再算："
                       "最大差 {diff}（序列长 {length}，块大小 8，共 {n_blocks} 个块）",
    "demo2.observations": [
        "无论块大小是多少，分页 KV 算出的 logits 都和连续 KV 一致到 1e-15：分页只改变 KV 存放的位置，不改变算什么。",
        "块越大，最后一块浪费得越多（这些短序列在块大小 16 时浪费 17%，64 时浪费 38%）；块越小，块表越长，"
        "读取也越零碎。vLLM 默认的块大小是 16。",
        "真正的 PagedAttention 内核从不把块拼起来：每个 warp 读一个块（论文 §5.1），就地在块上计算，"
        "这正是这里的按块注意力。",
    ],

    "demo3.parts": "Part 4（fork 和写时复制）",
    "demo3.title": "演示 3：并行采样，n 个样本共享提示的 KV"
                   "（提示 100 个 token，每个样本生成 40 个，温度 1，块大小 16）",
    "demo3.columns": ["样本数 n", "输出 vs 各自一份 KV", "最后一步用的块", "不共享时要的块", "平均省下的块",
                      "写时复制的次数"],
    "demo3.observations": [
        "n 个样本共享提示的 7 个块（100 个 token 里的 96 个填满 6 个块，第 7 块只有 4 个）。往这个未满的块里写时，"
        "前 n − 1 个样本各触发一次写时复制；最后一个发现引用计数已经是 1，直接就地写入，所以一共复制 n − 1 次。",
        "省下的比例随 n 增大，也取决于提示和输出的长短：提示越长、输出越短，省得越多。vLLM 论文在 Alpaca 上"
        "测到 6.1%–9.8%，在 ShareGPT 上测到 16.2%–30.5%（图 15）。",
        "输出和每个样本各自持有一份 KV 时完全相同：共享纯粹是显存上的优化。",
    ],

    "demo4.parts": "Part 4（fork 和写时复制）",
    "demo4.title": "演示 4：束搜索，候选之间共享前缀，对比整份复制（提示 64 个 token，生成 32 步，块大小 16）",
    "demo4.columns": ["束宽 k", "k 个结果", "整份复制：复制的 token", "分页：写时复制的 token", "平均省下的块",
                      "分页的峰值块数"],
    "demo4.observations": [
        "整份复制（vLLM 论文说以前的系统就是这么做的）每一步都把父候选的全部 KV 复制给每个子候选，复制量随序列长度"
        "和束宽增长；分页时，只有写进共享的最后一块才复制一个块（16 个 token）。",
        "束搜索的候选不只共享提示，还共享一起走过的路径：这里省下的比例远高于演示 3。vLLM 论文测到束搜索省下 "
        "37.6%–55.2%（Alpaca）和 44.3%–66.3%（ShareGPT），而并行采样只有 6.1%–30.5%。",
        "k 个结果完全相同：分页、共享和写时复制都不改变计算。",
    ],

    "demo5.parts": "Part 1–2，以及加分题 Part 5（PrefixCache、cached_prefill）",
    "demo5.title": "演示 5：共享系统提示的请求复用缓存里的块"
                   "（系统提示 {system} 个 token + 每个请求 {question} 个 token 的问题；"
                   "逐个 prefill，再一起 decode {steps} 步；块大小 {bs}）",
    "demo5.columns": ["请求数 R", "prefill 计算的 token：无缓存 / 有缓存", "缓存命中率", "峰值块数：无缓存 / 有缓存",
                      "输出 vs 无缓存", "与无缓存的最大差"],
    "demo5.after": "\n{R} 个请求都结束后，仍有 {n_used} 个块在用：那是缓存自己在系统提示的块 {blocks} 上持有的引用。"
                   "调用 evict(1) {n} 次，依次释放块 {order}：从链的尾部开始淘汰。",
    "demo5.observations": [
        "第一个请求算完整个提示，把系统提示的 {sys_blocks} 个满块留在缓存里。之后每个请求都按键找到它们（块 i 的键是"
        "到它末尾为止的整个前缀，所以同样的 token 跟在别的前缀后面不会命中），只需计算自己的问题："
        "R × {prompt} 个提示 token 变成 {prompt} + (R − 1) × {question} 个。",
        "缓存的块像演示 3 里的提示一样被共享：每块由 R 个请求持有，再加上缓存自己的一个引用（引用计数 R + 1），"
        "所以峰值从 R × {per_request} 个块降到 {sys_blocks} + R × {own} 个。",
        "只缓存满块，而且每个提示至少要算一个 token：第一个输出 token 要用它的 logits。每个问题所在的块只填了一部分，"
        "归该请求私有，decode 就写在这里（不会写时复制：满块永远不会被写）。",
        "paged_step 自己从不淘汰：每步 decode 之前，演示若发现空闲块不够，就先调用 cache.evict 补足差额"
        "（这里池有 {n_blocks} 个块，用不上）。",
        "输出和不用缓存时完全相同：命中复用的正是该请求本来会算出的 K/V。这是 vLLM 论文说的第三种共享"
        "（§4.4，跨请求共享前缀）；vLLM 的自动前缀缓存和 SGLang 的 RadixAttention 对每个请求都这样做，"
        "并按最近最少使用的顺序淘汰没人持有的缓存块。",
    ],
    "demo6.parts": "Part 1–2 和 4，以及加分题 Part 6（SwapSpace）",
    "demo6.title": "演示 6：请求比池能同时容纳的多，调度器靠抢占最近接纳的组来服务（vLLM 论文 §4.5：{R} 个请求，"
                   "每个有 {prompt} 个 token 的提示和 {n} 个样本、各生成 {new} 个 token；池有 {slots} 个 token 槽位，"
                   "CPU 空间一样多）",
    "demo6.columns": ["块大小 B", "池的块数（充足的池的峰值）", "抢占次数", "换出：换出 + 换入的块", "重算：token 数",
                      "步数（充足的池）", "输出 vs 充足的池：换出 / 重算"],
    "demo6.observations": [
        "充足的池能同时容纳所有请求（括号里是它的峰值）。只有 {slots} 个 token 槽位时，调度器在提示放得下时接纳请求；"
        "某一步 decode 放不下时，就抢占最近接纳的那一组，整组一起：它的 {n} 个样本共享提示的块，所以一组要么一起"
        "换出，要么一起重算。",
        "换出搬运的是块：块小时块多而小（论文的图 19 测到，每次搬运的开销让小块的换出很慢），块大时块少而大。"
        "重算什么都不搬运：它用一次 prefill 把这一组的 token（提示和样本已生成的部分）重新算一遍，GPU 做这件事很快；"
        "要算多少，取决于抢占了几组、它们已经走了多远。",
        "两种方式的输出都和充足的池完全相同：恢复的组从它原来的 K/V 接着走（换回的块像原来一样共享，重算的块重新"
        "算出），而每个样本的随机数只取决于它的请求、样本编号和位置。",
        "被抢占的组按先来先服务恢复，优先于任何新请求：抢占只会推迟请求，不会让任何请求饿死。代价体现在步数上："
        "同时运行的请求更少。",
    ],
}

TEXTS = {"en": EN, "zh": ZH}


def language(name):
    """gettext's convention: a language or locale name starting with "zh" (zh, zh_CN.UTF-8, zh_TW)
    selects Chinese; anything else, empty included, English."""
    return "zh" if str(name or "").lower().startswith("zh") else "en"
