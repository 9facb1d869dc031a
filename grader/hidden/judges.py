"""Judges that explain a difference in the terms of the assignment: which action of a script, what
state, with the block tables drawn. They print the script's shape (operations, sequence indices,
chunk sizes, block ids) but never the hidden token ids, prompts or seeds."""
from explain import describe_action, draw_tables

from grader.hidden.compare import ATTENTION_TOL, first_mismatch


def script_judge(case, expected, got):
    """The first action after which the submission's state or result differs from the reference's."""
    if not isinstance(got, list) or len(got) != len(expected):
        return "  the answer has the wrong form (was the scenario code tampered with?)"
    block_size = case.inputs.get("block_size")
    for n, (e, g) in enumerate(zip(expected, got), 1):
        found = first_mismatch(e, g, path="")
        if not found:
            continue
        field = found[0].lstrip(".") or "the record"
        lines = [f"  after action {n} of {len(expected)}, {describe_action(e['op'])}:",
                 f"    {field}: {found[1]}"]
        if "tables" in e and isinstance(g, dict) and (field.startswith(("tables", "lengths", "refcounts"))):
            lines.append(draw_tables("expected", e["tables"], e["lengths"], block_size, e["refcounts"]))
            if _drawable(g):
                lines.append(draw_tables("got", g["tables"], g["lengths"], block_size, g["refcounts"]))
        return "\n".join(lines)
    return None


def _drawable(rec):
    """Only lists of ints are drawn from the submission's side."""
    def ints(x):
        return isinstance(x, list) and all(type(i) is int for i in x)
    return (isinstance(rec.get("tables"), list) and all(ints(t) for t in rec["tables"])
            and ints(rec.get("lengths")) and isinstance(rec.get("refcounts"), list))


def attention_judge(case, expected, got):
    """blockwise cases: each query's output to 1e-12."""
    if not isinstance(got, list) or len(got) != len(expected):
        return "  the answer has the wrong form"
    for n, (e, g, c) in enumerate(zip(expected, got, case.inputs["cases"]), 1):
        found = first_mismatch(e, g, tol=ATTENTION_TOL, path="")
        if found:
            return (f"  query {n} of {len(expected)} (length {c['length']}, {len(c['table'])} blocks of "
                    f"{case.inputs['block_size']}, layer {c['layer']}): {found[0].lstrip('.') or 'output'}: {found[1]}")
    return None
