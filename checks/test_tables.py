"""The grading tables of both editions are the ones tools/tables.py writes from tests/registry.py.

The committed editions must equal their regeneration (so a table edited by hand, or a registry
changed without `python tools/tables.py`, fails here), and what is generated is read back with
test_handout's parser, independently of the generator, and compared with the registry's fields.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import tables  # noqa: E402
from test_handout import BONUS_TABLE, grading_table  # noqa: E402

registry = tables.registry
EN, ZH = ROOT / "assignment.md", ROOT / "assignment.zh-CN.md"
ZH_TABLE, ZH_BONUS_TABLE = "| Part | 检查项 | 分数 |", "| 加分题 Part | 检查项 | 额外分数 |"


def test_the_committed_tables_are_the_generated_ones():
    assert tables.stale() == [], "run python tools/tables.py (the registry and the editions' tables differ)"
    for path in (EN, ZH):
        assert tables.tables_in(path.read_text(encoding="utf-8")) == ["parts", "checks", "bonus"], path.name


@pytest.mark.parametrize("zh", [False, True], ids=["en", "zh"])
def test_the_generated_tables_say_what_the_registry_says(zh):
    """Parsed back (test_handout.grading_table, not the generator): every check's part, title in
    the edition's language and points, in the registry's order, and each part's total."""
    text = "\n".join(tables.table("checks", zh) + [""] + tables.table("bonus", zh))
    title = "title_zh" if zh else "title"
    for header, parts in (((ZH_TABLE if zh else "| Part | Check | Points |"), registry.core()),
                          ((ZH_BONUS_TABLE if zh else BONUS_TABLE), registry.bonus())):
        rows, totals = grading_table(text, header)
        assert rows == [(c.part, getattr(c, title), c.points) for p in parts for c in registry.checks_of(p.id)]
        want = [(p.id, sum(c.points for c in registry.CHECKS.values() if c.part == p.id)) for p in parts]
        assert totals == (want + [("", 100)] if parts == registry.core() else want)
    first = tables.table("parts", zh)[2]
    assert first == ("| 1 | 块分配器：带引用计数的块池，先分配编号最小的空闲块 | 25 |" if zh else
                     "| 1 | the block allocator: a refcounted pool, lowest free block first | 25 |")


def test_a_points_change_in_the_registry_alone_is_caught(monkeypatch):
    """One point moved between two Part 2 checks in the registry: the committed tables are stale
    until regenerated, and the regenerated row has the new points."""
    checks = dict(registry.CHECKS)
    a, b = checks["paged_step.prefill"], checks["paged_step.chunked_prefill"]
    checks[a.id], checks[b.id] = a._replace(points=a.points - 1), b._replace(points=b.points + 1)
    monkeypatch.setattr(registry, "CHECKS", checks)
    assert tables.stale() == ["assignment.md", "assignment.zh-CN.md"]
    assert "| `paged_step` | a prompt fed in chunks equals one-shot prefill | 4 |" in \
        tables.rewrite(EN.read_text(encoding="utf-8"), False)


@pytest.mark.parametrize("path, old, new", [
    (ZH, "| `allocator` | peak_used 是 n_used 到达过的最大值 | 2 |", "| `allocator` | peak_used 是 n_used 到达过的最大值 | 3 |"),
    (ZH, "| `blockwise_attention` | 长度 0：ValueError | 1 |\n", ""),
    (EN, "| `prefix_cache` | **total, Part 5 (bonus)** | **10** |", "| `prefix_cache` | **total, Part 5 (bonus)** | **11** |"),
    (EN, "| 3 | blockwise attention: the paper's eq. 4, one block at a time | 15 |",
     "| 3 | blockwise attention: eq. 4, one block at a time | 15 |"),
])
def test_a_table_edited_by_hand_is_caught(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is gone from {path.name}: update the proof"
    edited = text.replace(old, new)
    assert tables.rewrite(edited, path == ZH) != edited
    assert tables.rewrite(edited, path == ZH) == text


def test_an_unknown_table_is_refused():
    with pytest.raises(ValueError, match="no generated table named 'scores'"):
        tables.rewrite("<!-- table: scores -->\n| a |\n<!-- /table -->\n", False)
