"""tests/registry.py, the one list of parts and checks, against the files it describes.

Independent of the code that reads it: the starter's stubs are parsed for the part their TODO
names, the contract (../shared/CONTRACT.md) for the names, the test folders for the files; and a
registry that cannot be right refuses to load.
"""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import registry  # noqa: E402

STARTER = (ROOT / "starter" / "paged_kv.py").read_text()


def stub_parts():
    """{dotted name: N} for every stub of the starter, from its NotImplementedError("TODO Part N...: name")."""
    return {name: int(n) for n, name in re.findall(r'raise NotImplementedError\("TODO Part (\d+)[^":]*: ([\w.]+)"\)',
                                                   STARTER)}


def test_every_registered_name_is_a_stub_of_its_part_in_the_starter():
    stubs = stub_parts()
    for part in registry.PARTS:
        for name in part.names:
            if name.kind == "reexport":
                assert f"from {registry.REEXPORTED_FROM} import" in STARTER and name.dotted in STARTER
                continue
            stub = f"{name.dotted}.__init__" if name.kind == "class" else name.dotted
            assert stubs.get(stub) == part.number, f"{stub}: the starter's stub says Part {stubs.get(stub)}, " \
                                                   f"the registry {part.number}"


def test_every_stub_of_the_starter_is_a_name_of_the_registry():
    """Properties of Parts 1-4 (n_used, peak_used, ...) are the pool's state, read by the tests, not
    names the import probe looks for; every other stub is registered."""
    registered = {n.dotted for p in registry.PARTS for n in p.names}
    registered |= {f"{n.dotted}.__init__" for p in registry.PARTS for n in p.names if n.kind == "class"}
    left = sorted(set(stub_parts()) - registered)
    assert left == ["BlockPool.n_free", "BlockPool.n_used", "BlockPool.peak_used"], left


def test_every_name_is_in_the_contract_and_every_part_has_its_files():
    contract = (ROOT.parent / "shared" / "CONTRACT.md")
    if not contract.exists():
        pytest.skip("../shared/CONTRACT.md is not beside the project")
    text = contract.read_text()
    for part in registry.PARTS:
        for name in part.names:
            assert re.search(rf"\b{re.escape(name.dotted.split('.')[-1])}\b", text), name.dotted
        assert (ROOT / "tests" / part.test_file).is_file() and (ROOT / "grader" / "hidden" / part.test_file).is_file()
        assert f"## {registry.section(part.id)}" in (ROOT / "assignment.md").read_text()
        assert f"## {registry.section(part.id, zh=True)}" in (ROOT / "assignment.zh-CN.md").read_text()


@pytest.mark.parametrize("change, refused", [
    (lambda c: {**c, "nowhere.x": registry.Check("nowhere.x", "nowhere", 1, "x", "某")}, "no part 'nowhere'"),
    (lambda c: {**c, "allocator.layout": c["allocator.layout"]._replace(points=0)}, "positive int"),
    (lambda c: {**c, "allocator.layout": c["allocator.layout"]._replace(points=2.5)}, "positive int"),
    (lambda c: {**c, "allocator.layout": c["allocator.layout"]._replace(title_zh="")}, "both languages"),
    (lambda c: {**c, "allocator.layout": c["allocator.layout"]._replace(title=c["allocator.refcounts"].title)},
     "same title"),
    (lambda c: {k: v for k, v in c.items() if not k.startswith("blockwise_attention.")}, "has no check"),
    (lambda c: {"paged_step.prefill": c["paged_step.prefill"], **c}, "grouped by part"),
])
def test_a_registry_that_cannot_be_right_does_not_load(monkeypatch, change, refused):
    monkeypatch.setattr(registry, "CHECKS", change(dict(registry.CHECKS)))
    monkeypatch.setattr(registry, "_CHECKS", list(registry.CHECKS))
    with pytest.raises(AssertionError, match=refused):
        registry._validate()


def test_parts_are_numbered_in_order_with_the_bonus_last(monkeypatch):
    parts = list(registry.PARTS)
    monkeypatch.setattr(registry, "PARTS", tuple(parts[:2] + parts[3:]))
    with pytest.raises(AssertionError, match="numbered"):
        registry._validate()
    swapped = [p._replace(number=i) for i, p in enumerate([parts[4]] + parts[:4], 1)]
    monkeypatch.setattr(registry, "PARTS", tuple(swapped))
    with pytest.raises(AssertionError, match="bonus parts come last"):
        registry._validate()
