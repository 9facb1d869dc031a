"""The two editions of the handout kept in step: assignment.zh-CN.md with assignment.md, and the
Chinese half of handout/README.md with its English half.

Every Chinese heading is preceded by an anchor naming the English heading it translates,
`<!-- en: ## Part 1: the block allocator -->`, so sections pair up by name. Compared:
  - headings: the anchors, in order, equal the English headings (level and text), and each Chinese
    heading has its anchor's level;
  - per section (a heading down to the next one): the fenced blocks, in order, byte-equal; the
    inline code spans, as a multiset, byte-equal; the numbers written as digits in the rest of the
    text (tables included, HTML comments and code left out), as a multiset; the lines that open and
    close the bonus regions (`<!-- bonus -->`, `<!-- /bonus -->`), as counts;
  - a picture may have its labels translated: a block the Chinese edition fences as ```text where
    the English fence has no language; it must have as many lines, and on each line the same
    numbers, [cells], "quoted strings" and calls f(...), in the same order;
  - the grading tables are not compared here: tools/tables.py writes both editions' from
    tests/registry.py, and checks/test_tables.py keeps the committed ones equal to them;
  - with the bonus switched off, the handout's two editions (bonus regions stripped by
    tools/build_handout.py) still agree, and the Chinese one has no bonus text left.
Each comparison is proven able to fail on modified copies of the real files.
"""
import difflib
import re
import sys
import zipfile
from collections import Counter, namedtuple
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))
import build_handout  # noqa: E402
from grader import rubric  # noqa: E402
from test_handout import grading_table  # noqa: E402    the one parser of grading tables

EN, ZH = ROOT / "assignment.md", ROOT / "assignment.zh-CN.md"
README = ROOT / "handout" / "README.md"
README_EN_START = "## English"                # the README: Chinese half first, this line starts the English
ZH_TABLE_HEADER = "| Part | 检查项 | 分数 |"
ZH_BONUS_TABLE = "| 加分题 Part | 检查项 | 额外分数 |"   # the extra-credit table, in a bonus region
BONUS_MARKERS = ("<!-- bonus -->", "<!-- /bonus -->")     # a line each; see tools/build_handout.py

ANCHOR = re.compile(r"<!-- en: (#{1,6} .+?) -->")
HEADING = re.compile(r"#{1,6} \S.*")
FENCE = re.compile(r"(```+|~~~+)(.*)")
COMMENT = re.compile(r"<!--.*?-->", re.S)
SPAN = re.compile(r"(`+)(.+?)\1", re.S)
NUMBER = r"(?<![A-Za-z0-9_])\d+(?:,\d{3})*(?:\.\d+)*(?:e-?\d+)?"
PICTURE_TOKEN = re.compile(r'"[^"]*"|\[[^\]]*\]|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\([^()]*\)|' + NUMBER, re.A)

Section = namedtuple("Section", "heading anchor fences spans numbers regions")


# ------------------------------------------------------------------------------------- parsing
def sections(text):
    """The sections of a markdown text, split at its headings (not inside fenced blocks): the
    heading line ('' before the first), the anchor just above it (None without one), the fenced
    blocks as (language, body), the inline code spans and the numbers of the rest, and how many
    lines open and close a bonus region."""
    out, prose = [], []
    heading, anchor, fences, fence, previous = "", None, [], None, ""

    def close():
        rest = COMMENT.sub("", "\n".join(prose))
        spans = [re.sub(r"\s*\n\s*", " ", m.group(2)) for m in SPAN.finditer(rest)]
        numbers = re.findall(NUMBER, SPAN.sub(" ", rest))
        regions = tuple(sum(line.strip() == marker for line in prose) for marker in BONUS_MARKERS)
        out.append(Section(heading, anchor, fences, Counter(spans), Counter(numbers), regions))

    for line in text.splitlines():
        if fence is not None:                                  # inside a fenced block
            if line.strip() == fence[0]:
                fences.append((fence[1], "\n".join(fence[2])))
                fence = None
            else:
                fence[2].append(line)
            continue
        m = FENCE.fullmatch(line.strip())
        if m:
            fence = (m.group(1), m.group(2).strip(), [])
        elif HEADING.fullmatch(line):
            close()
            a = ANCHOR.fullmatch(previous.strip())
            heading, anchor, fences, prose = line.strip(), a and a.group(1), [], [line]
        else:
            prose.append(line)
        if line.strip():
            previous = line
    assert fence is None, f"a fenced block is never closed: {fence[2][:1]}"
    close()
    return out


def readme_halves(text):
    """(English half, Chinese half) of the bilingual README: the Chinese runs from its first anchor
    to the line README_EN_START, the English from there to the end; the title above is shared."""
    lines = text.splitlines()
    assert README_EN_START in lines, f"the README has no line {README_EN_START!r}"
    split = lines.index(README_EN_START)
    first = next(i for i, line in enumerate(lines) if ANCHOR.fullmatch(line.strip()))
    return "\n".join(lines[split:]), "\n".join(lines[first:split])


# ---------------------------------------------------------------------------------- comparison
def counter_diff(what, en, zh):
    """'what: only in English: ...; only in Chinese: ...' for two multisets, or None if equal."""
    only_en, only_zh = sorted((en - zh).elements()), sorted((zh - en).elements())
    if not only_en and not only_zh:
        return None
    return f"{what}: " + ", ".join(f"only in {lang} {items}" for lang, items in
                                   (("English", only_en), ("Chinese", only_zh)) if items)


def picture_tokens(line):
    return PICTURE_TOKEN.findall(line)


def fence_problems(en_fences, zh_fences):
    """What differs between the fenced blocks of one section, in order."""
    if len(en_fences) != len(zh_fences):
        return [f"{len(en_fences)} fenced blocks in English, {len(zh_fences)} in Chinese"]
    problems = []
    for i, ((en_lang, en_body), (zh_lang, zh_body)) in enumerate(zip(en_fences, zh_fences), 1):
        if (en_lang, en_body) == (zh_lang, zh_body):
            continue
        if en_lang == "" and zh_lang == "text":                # a picture with translated labels
            en_lines, zh_lines = en_body.splitlines(), zh_body.splitlines()
            if len(en_lines) != len(zh_lines):
                problems.append(f"picture {i}: {len(en_lines)} lines in English, {len(zh_lines)} in Chinese")
                continue
            for n, (e, z) in enumerate(zip(en_lines, zh_lines), 1):
                if picture_tokens(e) != picture_tokens(z):
                    problems.append(f"picture {i}, line {n}: numbers, cells, strings or calls differ: English "
                                    f"{picture_tokens(e)}, Chinese {picture_tokens(z)}")
            continue
        first = next((n for n, (e, z) in enumerate(zip(en_body.splitlines() + [""], zh_body.splitlines() + [""]), 1)
                      if e != z), None)
        where = f"language {en_lang!r} vs {zh_lang!r}" if en_lang != zh_lang else f"line {first}"
        problems.append(f"code block {i} differs ({where}); a picture whose labels are translated is fenced "
                        "```text in the Chinese edition")
    return problems


def edition_problems(en_text, zh_text):
    """Every way the Chinese text has drifted from the English one, as readable lines. Sections
    pair up in order by their anchors (difflib, so a missing, extra or moved one is named and the
    rest still pair up); the text above the first heading pairs with the other's."""
    en, zh = sections(en_text), sections(zh_text)
    problems = [f"Chinese heading {s.heading!r} has no `<!-- en: ... -->` anchor on the line above"
                for s in zh if s.heading and s.anchor is None]
    problems += [f"Chinese heading {s.heading!r} is level {len(s.heading.split()[0])}, its anchor {s.anchor!r} "
                 f"level {len(s.anchor.split()[0])}" for s in zh
                 if s.anchor and s.heading.split()[0] != s.anchor.split()[0]]
    en_sections, zh_sections = en[1:], [s for s in zh[1:] if s.anchor]
    en_headings, anchors = [s.heading for s in en_sections], [s.anchor for s in zh_sections]
    pairs, missing, extra = [(en[0], zh[0])], [], []
    matcher = difflib.SequenceMatcher(a=en_headings, b=anchors, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pairs += zip(en_sections[i1:i2], zh_sections[j1:j2])
        else:
            missing += en_headings[i1:i2]
            extra += anchors[j1:j2]
    moved = [h for h in missing if h in extra]
    problems += [f"section {h!r} is in another place in the Chinese edition" for h in moved]
    problems += [f"section {h!r} is missing from the Chinese edition" for h in missing if h not in moved]
    problems += [f"the Chinese anchor {a!r} names no English heading, or one more time than the English has it"
                 for a in extra if a not in moved]
    for e, z in pairs:
        name = f"section {e.heading!r}" if e.heading else "above the first heading"
        for p in fence_problems(e.fences, z.fences):
            problems.append(f"{name}: {p}")
        for what, a, b in (("inline code", e.spans, z.spans), ("numbers", e.numbers, z.numbers)):
            p = counter_diff(what, a, b)
            if p:
                problems.append(f"{name}: {p}")
        if e.regions != z.regions:
            problems.append(f"{name}: bonus regions differ: lines {BONUS_MARKERS[0]} / {BONUS_MARKERS[1]}: "
                            f"English {e.regions[0]} / {e.regions[1]}, Chinese {z.regions[0]} / {z.regions[1]}")
    return problems


def all_problems(en_text, zh_text):
    return edition_problems(en_text, zh_text)


def report(problems):
    return "the two editions differ (edit both; see README.md, \"Changing things\"):\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------- the real editions
def test_the_chinese_assignment_matches_the_english():
    problems = all_problems(EN.read_text(), ZH.read_text())
    assert not problems, report(problems)


def test_the_readme_halves_match():
    problems = edition_problems(*readme_halves(README.read_text()))
    assert not problems, report(problems)


def test_the_handout_ships_both_editions(tmp_path):
    with zipfile.ZipFile(build_handout.build(tmp_path / "handout.zip", bonus=True)) as z:
        top = build_handout.TOP
        names = z.namelist()
        for name in ("assignment.md", "assignment.zh-CN.md", "README.md"):
            assert f"{top}/{name}" in names, f"{name} is missing from the handout"
        assert z.read(f"{top}/assignment.zh-CN.md") == ZH.read_bytes()
        assert z.read(f"{top}/README.md") == README.read_bytes()
    _, chinese = readme_halves(README.read_text())
    for must in ("`assignment.zh-CN.md`", "\nmake demo LANG=zh ", "用中文打印", "失败消息是英文的"):
        assert must in chinese, f"the Chinese README does not say {must!r}"


# Words only the bonus text uses: in the Chinese edition, or in English the Chinese keeps.
ZH_BONUS_WORDS = ("Part 5", "加分", "额外", "prefix_cache", "PrefixCache", "cached_prefill", "前缀缓存", "系统提示",
                  "演示 5", "淘汰", "bonus", "extra credit")


def test_switching_the_bonus_off_strips_the_chinese_edition_too(bonus_off, tmp_path):
    """rubric.switch_bonus(False): the handout build (reading rubric.BONUS) leaves no bonus text in
    assignment.zh-CN.md, and the two stripped editions still agree, grading tables included (Parts
    1-4 alone, no extra-credit table)."""
    with zipfile.ZipFile(build_handout.build(tmp_path / "off.zip")) as z:
        en, zh = (z.read(f"{build_handout.TOP}/{name}").decode("utf-8") for name in ("assignment.md", "assignment.zh-CN.md"))
    source = ZH.read_text()
    for word in ZH_BONUS_WORDS + BONUS_MARKERS:
        assert word in source, f"{word!r} is not in assignment.zh-CN.md at all: update the list"
        assert word not in zh, f"{word!r} is left in the Chinese edition with the bonus off"
    assert "## Part 5" not in en and "<!-- bonus -->" not in en      # checks/test_handout.py has the rest
    problems = edition_problems(en, zh)
    assert not problems, report(problems)
    assert grading_table(zh, ZH_BONUS_TABLE) is None
    assert grading_table(zh, ZH_TABLE_HEADER)[0] == \
        [(c.part, rubric.registry.CHECKS[c.id].title_zh, c.points) for c in rubric.CHECKS.values()]
    assert [s.anchor for s in sections(zh)] == \
        [s.anchor for s in sections(source) if not (s.anchor or "").startswith(
            tuple(f"## {rubric.SECTIONS[p.id]}" for p in rubric.registry.bonus())
            + tuple(f"### Demo {p.number}" for p in rubric.registry.bonus()))]


# -------------------------------------------------------------------- the check can fail: proofs
def section_span(text, anchor):
    """(start, end) offsets of the Chinese section whose anchor names `anchor`, anchor line included."""
    start = text.index(f"<!-- en: {anchor} -->")
    nxt = text.find("<!-- en: ", start + 1)
    return start, len(text) if nxt < 0 else nxt


def fenced_bodies(text):
    return [body for s in sections(text) for _, body in s.fences]


def mutate(text, old, new, count=1):
    assert text.count(old) >= 1, f"the mutation's target {old!r} is gone from the file: update the proof"
    out = text.replace(old, new, count)
    assert out != text
    return out


@pytest.fixture(scope="module")
def texts():
    """The real editions; the proofs below count only the problems a change adds to theirs (none
    when they agree), so they hold while a new English section waits for its translation."""
    return EN.read_text(), ZH.read_text()


def all_new(en, zh2):
    """The problems of (en, zh2) that the real editions do not have."""
    before = set(all_problems(EN.read_text(), ZH.read_text()))
    return [p for p in all_problems(en, zh2) if p not in before]


def test_a_removed_section_is_caught(texts):
    en, zh = texts
    start, end = section_span(zh, "## Part 3: blockwise attention")
    problems = all_new(en, zh[:start] + zh[end:])
    assert "section '## Part 3: blockwise attention' is missing from the Chinese edition" in problems, problems


def test_a_section_new_in_english_only_is_caught(texts):
    en, zh = texts
    en2 = mutate(en, "## FAQ\n", "## Part 5 (bonus): prefix caching\n\nCache `full` blocks.\n\n## FAQ\n")
    assert any("'## Part 5 (bonus): prefix caching' is missing" in p for p in all_new(en2, zh))


def test_sections_in_another_order_are_caught(texts):
    en, zh = texts
    s3, e3 = section_span(zh, "## Part 3: blockwise attention")
    s4, e4 = section_span(zh, "## Part 4: sharing and copy-on-write")
    assert e3 == s4
    swapped = zh[:s3] + zh[s4:e4] + zh[s3:e3] + zh[e4:]
    problems = all_new(en, swapped)
    assert "section '## Part 3: blockwise attention' is in another place in the Chinese edition" in problems \
        or "section '## Part 4: sharing and copy-on-write' is in another place in the Chinese edition" in problems, \
        problems


def test_a_heading_without_anchor_or_at_another_level_is_caught(texts):
    en, zh = texts
    no_anchor = mutate(zh, "<!-- en: ## FAQ -->\n", "")
    problems = all_new(en, no_anchor)
    assert any("has no `<!-- en: ... -->` anchor" in p for p in problems)
    assert any("'## FAQ' is missing" in p for p in problems)
    level = zh[:section_span(zh, "## FAQ")[0]] + re.sub(r"\n## ", "\n### ", zh[section_span(zh, "## FAQ")[0]:], 1)
    assert any("level 3, its anchor '## FAQ' level 2" in p for p in all_new(en, level))


def test_an_altered_code_block_is_caught(texts):
    en, zh = texts
    block = next(b for b in fenced_bodies(zh) if "init_params(cfg, seed=0)" in b)
    problems = all_new(en, mutate(zh, block, block.replace("seed=0", "seed=1")))
    assert any("section '## What you are given': code block 1 differs (line 5)" in p for p in problems), problems


def test_an_altered_picture_is_caught(texts):
    en, zh = texts
    pictures = [b for s in sections(zh) for lang, b in s.fences if lang == "text"]
    assert len(pictures) >= 3, "the Chinese edition's translated pictures (```text) are gone: update the proof"
    picture = next(b for b in pictures if "copy_block(6) = 7" in b)
    for old, new, caught in [("copy_block(6) = 7", "copy_block(6) = 9", "line 5: numbers"),
                             ("[0][1][2][3][4][5][7]", "[0][1][2][3][4][7]", "line 9: numbers, cells"),
                             ("copy_block(6) = 8", "copy(6) = 8", "line 6: numbers, cells, strings or calls")]:
        problems = all_new(en, mutate(zh, picture, picture.replace(old, new)))
        assert any(caught in p for p in problems), (old, problems)
    dropped = "\n".join(picture.splitlines()[:-1])
    assert any("lines in English" in p for p in all_new(en, mutate(zh, picture, dropped)))


def test_an_altered_inline_code_span_is_caught(texts):
    en, zh = texts
    problems = all_new(en, mutate(zh, "`blocks[p // B]`", "`blocks[p / B]`"))
    assert any("inline code: only in English ['blocks[p // B]'], only in Chinese ['blocks[p / B]']" in p
               for p in problems), problems


@pytest.mark.parametrize("section, sentence, lost", [
    ("## Part 2: paged KV and the paged step", "最后一块如果未满（`length % B != 0`）且引用计数 r > 1，", "'min(n, r - 1)'"),
    ("## Part 5 (bonus): shared prefix across requests", "  1. 如果 `len(blocks) < len(tokens) // B`，", "'[0, n_blocks)'"),
])
def test_a_rule_left_out_of_the_chinese_is_caught(texts, section, sentence, lost):
    """Issue 15's rules, stated where students look for them: the copy count of a step in Part 2, and
    insert's steps in Part 5. A Chinese edition without the sentence is caught by its code spans."""
    en, zh = texts
    start = zh.index(sentence)
    end = zh.index("\n", start) if sentence.startswith("  1.") else zh.index("先数清楚", start)
    problems = all_new(en, zh[:start] + zh[end:])
    assert any(p.startswith(f"section {section!r}: inline code: only in English [") and lost in p
               for p in problems), problems


def test_a_changed_number_is_caught(texts):
    en, zh = texts
    start, end = section_span(zh, "### The KV cache wastes memory")
    section = zh[start:end]
    assert "20.4%" in section
    problems = all_new(en, zh[:start] + section.replace("20.4%", "24.0%") + zh[end:])
    assert "section '### The KV cache wastes memory': numbers: only in English ['20.4'], only in Chinese ['24.0']" \
        in problems, problems
    dropped = all_new(en, mutate(zh, "长度 10，块大小 4", "长度 10，块大小"))
    assert any("numbers: only in English ['4']" in p for p in dropped), dropped


def test_a_missing_bonus_region_is_caught(texts):
    """A bonus line outside its region (the markers dropped in Chinese): the sync check names the
    section, and with the bonus off the line would stay in the Chinese handout alone."""
    en, zh = texts
    region = "<!-- bonus -->\nPart 5 里同样不计分的有"
    assert region in zh, "the Chinese 'What is not graded' bonus region is gone: update the proof"
    zh2 = mutate(zh, region, region.split("\n", 1)[1]).replace("<!-- /bonus -->\n\n<!-- en: ### What a submission", "\n<!-- en: ### What a submission")
    assert zh2.count("<!-- /bonus -->") == zh.count("<!-- /bonus -->") - 1
    problems = all_new(en, zh2)
    assert "section '### What is not graded': bonus regions differ: lines <!-- bonus --> / <!-- /bonus -->: " \
           "English 1 / 1, Chinese 0 / 0" in problems, problems
    off = edition_problems(build_handout.without_bonus_markdown(en), build_handout.without_bonus_markdown(zh2))
    said = [p for p in off if p.startswith("section '### What is not graded': numbers: only in Chinese [")]
    assert said and "'5'" in said[0], off


def test_the_readme_halves_are_compared():
    text = README.read_text()
    en, zh = readme_halves(text)
    assert "### What is here" in en and "<!-- en: ### What is here -->" in zh
    before = set(edition_problems(en, zh))

    def new(zh2):
        return [p for p in edition_problems(en, zh2) if p not in before]
    assert any("numbers: only in English ['3.9'], only in Chinese ['3.8']" in p
               for p in new(mutate(zh, "3.9", "3.8"))), "a changed number in the Chinese README"
    assert any("inline code" in p for p in new(mutate(zh, "`make test PYTHON=python3.12`", "`make test`")))
    start = zh.index("<!-- en: ### What is here -->")
    end = zh.index("<!-- en: ", start + 1)
    assert any("'### What is here' is missing" in p for p in new(zh[:start] + zh[end:]))
