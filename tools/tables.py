"""Write the grading tables of both editions of the assignment from tests/registry.py (staff only).

    python tools/tables.py            rewrite every generated table in assignment.md and assignment.zh-CN.md
    python tools/tables.py --check    exit 1, naming the files, when a committed table is not the generated one

A generated table sits between a line `<!-- table: NAME -->` and a line `<!-- /table -->`; NAME is
`parts` (the parts of the 100 points and their points), `checks` (every check of those parts, a
total per part and the total), `bonus` (the extra-credit checks, a total per bonus part) or `bound`
(README.md: the most one submission's feedback can tell, grader/feedback.py's figures). The text
around the markers is the editions' own; checks/test_tables.py keeps the committed tables equal to
these, so a check's points or titles change in the registry alone.
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import registry  # noqa: E402

EDITIONS = {"assignment.md": False, "assignment.zh-CN.md": True}     # file -> Chinese?
GENERATED = {**EDITIONS, "README.md": False}     # every file with generated regions (README: the feedback bound)
REGION = re.compile(r"^<!-- table: (\w+) -->\n(.*?)^<!-- /table -->$", re.M | re.S)
WORDS = {   # (English, Chinese)
    "parts_header": ("| part | what | points |", "| Part | 内容 | 分数 |"),
    "checks_header": ("| Part | Check | Points |", "| Part | 检查项 | 分数 |"),
    "bonus_header": ("| Bonus part | Check | Extra points |", "| 加分题 Part | 检查项 | 额外分数 |"),
    "part_total": ("total, Part {n}", "合计，Part {n}"),
    "bonus_total": ("total, Part {n} (bonus)", "合计，Part {n}（加分题）"),
    "total": ("total", "总计"),
}


def _cell(text):
    """Markdown-safe table cell: `*` and `|` escaped (the tables' parser unescapes them)."""
    return re.sub(r"([*|])", r"\\\1", text)


def _word(key, zh, **kw):
    return WORDS[key][zh].format(**kw)


def _check_rows(parts, zh, total_key):
    rows = []
    for p in parts:
        for c in registry.checks_of(p.id):
            rows.append(f"| `{p.id}` | {_cell(c.title_zh if zh else c.title)} | {c.points} |")
        rows.append(f"| `{p.id}` | **{_word(total_key, zh, n=p.number)}** | **{registry.points(p.id)}** |")
    return rows


def table(name, zh):
    """The lines of one generated table."""
    core = registry.core()
    if name == "parts":
        rows = [f"| {p.number} | {p.title_zh if zh else p.title}{'：' if zh else ': '}"
                f"{_cell(p.summary_zh if zh else p.summary)} | {registry.points(p.id)} |" for p in core]
        return [_word("parts_header", zh), "|---|---|---:|"] + rows
    if name == "checks":
        total = sum(registry.points(p.id) for p in core)
        return [_word("checks_header", zh), "|---|---|---:|"] + _check_rows(core, zh, "part_total") + \
            [f"| | **{_word('total', zh)}** | **{total}** |"]
    if name == "bonus":
        return [_word("bonus_header", zh), "|---|---|---:|"] + _check_rows(registry.bonus(), zh, "bonus_total")
    if name == "bound":
        return _bound()
    raise ValueError(f"no generated table named {name!r} (parts, checks, bonus, bound)")


def _bound():
    """README's sentence on the most one submission's feedback can tell (grader/feedback.py's figures)."""
    sys.path.insert(0, str(ROOT))
    from grader import feedback, rubric
    n, parts = len(rubric.CHECKS), len(rubric.ALL_PARTS)
    b = {level: f"{round(feedback.bound_bits(level)):,}" for level in feedback.LEVELS}
    return [f"per check how many of its at most {feedback.MOST_CASES} cases passed (and, but at `points`, how many",
            f"failing ones it leaves unsaid), {n} checks; per message shown ({feedback.MAX_FEEDBACK} per check) where "
            "the answer first",
            f"differs (which case and how many share the message, the action of at most 256, the field: "
            f"{feedback.PLACE_BITS} bits), and",
            f"at `full` where the message stops showing values ({feedback.STOP_BITS} bits) and the values, "
            f"{feedback.PART_BITS} bits for",
            f"each of the {parts} parts. In all: `full` {b['full']} bits, `brief` {b['brief']} bits, `points` "
            f"{b['points']} bits per",
            "submission (for scale: the hidden inputs hold about 3,500 tokens of 8 bits per student)."]


def rewrite(text, zh):
    """The text with every generated table replaced by the registry's; ValueError for an unknown name."""
    def one(m):
        body = "\n".join(table(m.group(1), zh))
        return f"<!-- table: {m.group(1)} -->\n{body}\n<!-- /table -->"
    return REGION.sub(one, text)


def tables_in(text):
    """The names of the generated tables of a text, in order."""
    return [m.group(1) for m in REGION.finditer(text)]


def stale(root=ROOT):
    """The files whose committed tables are not the generated ones."""
    return [name for name, zh in GENERATED.items()
            if rewrite((root / name).read_text(encoding="utf-8"), zh) != (root / name).read_text(encoding="utf-8")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say which files differ (exit 1)")
    args = ap.parse_args(argv)
    if args.check:
        files = stale()
        for name in files:
            print(f"{name}: its grading tables are not tests/registry.py's; run python tools/tables.py")
        return 1 if files else 0
    for name, zh in GENERATED.items():
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, zh)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote the tables of {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
