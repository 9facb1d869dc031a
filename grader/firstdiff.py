"""The start of a failure message as the student's summary quotes it, and the cause it names.

A judge's message is indented structure (tests/explain.py, grader/hidden/judges.py):

    <check title> (<case>):
      after action 7 of 8, step(...):
        unchanged: expected True, got False
        (a call that raised must change nothing ...)
        before:
          seq 0  length 5, ...
    Read assignment.md, section "...".

The summary has room for a few lines, and a cut in the middle of that structure misleads: a
`before:` with nothing under it, an `expected True, got False` without the line that says what was
expected. So the quote takes whole pieces only: a line keeps the "(...)" lines right after it (its
explanation), a picture (a short title ending in ":", like `before:`) is quoted whole or not at
all, and a line ending in ":" is never quoted without what it introduces. What is left out is said
to be in the check's own test. The header repeats the check's title, which the summary already
names, so only its case label is kept.
"""
import re

_PICTURE = re.compile(r"[\w][\w .,'/-]{0,29}:")         # "before:", "after:", "expected tables:"
_READ = "Read assignment.md"


class _Node:
    def __init__(self, indent, line):
        self.indent, self.lines, self.children = indent, [line], []

    @property
    def text(self):
        return self.lines[0].strip()

    def all_lines(self):
        return self.lines + [line for child in self.children for line in child.all_lines()]


def _tree(message):
    """Top-level nodes of the message's lines, by indentation; "Read assignment.md" lines dropped."""
    top, stack = [], []
    for line in (message or "").splitlines():
        if not line.strip() or line.startswith(_READ):
            continue
        indent = len(line) - len(line.lstrip())
        if stack and stack[-1].indent == indent and line.lstrip().startswith("(") and stack[-1].text[:1] != "(":
            stack[-1].lines.append(line)                      # the explanation of the line before
            continue
        while stack and stack[-1].indent >= indent:
            stack.pop()
        node = _Node(indent, line)
        (stack[-1].children if stack else top).append(node)
        stack.append(node)
    return top


def _body(title, message):
    """(case label or "", the nodes after the header) of a message."""
    nodes = _tree(message)
    if nodes and title and nodes[0].text.startswith(title):
        label = nodes[0].text[len(title):].strip().rstrip(":").strip()
        if label.startswith("(") and label.endswith(")"):
            label = label[1:-1]
        return label, nodes[0].children + nodes[1:]
    return "", nodes


def _picture(node):
    return bool(node.children) and bool(_PICTURE.fullmatch(node.text))


def _pieces(nodes):
    """The nodes in quotable pieces: pictures side by side (before: and after:) are one piece."""
    pieces = []
    for node in nodes:
        if _picture(node) and pieces and _picture(pieces[-1][-1]):
            pieces[-1].append(node)
        else:
            pieces.append([node])
    return pieces


def _render(piece, budget):
    """(lines of the piece and of as much of its subtree as fits in `budget`, what was left out:
    None for nothing, else the titles of the pictures left out). Pictures are whole or nothing; a
    line ending in ":" never stands without a line under it."""
    if _picture(piece[0]):
        whole = [line for node in piece for line in node.all_lines()]
        return (whole, None) if len(whole) <= budget else ([], [node.text.rstrip(":") for node in piece])
    node = piece[0]
    if len(node.lines) > budget:
        return [], []
    below, cut = _fill(node.children, budget - len(node.lines))
    if node.children and node.text.endswith(":") and not below:
        return [], cut or []
    return node.lines + below, cut


def _fill(nodes, budget):
    """_render of the nodes' pieces in order, until one does not fit."""
    out, cut = [], None
    for piece in _pieces(nodes):
        got, cut = _render(piece, budget - len(out))
        out += got
        if cut is not None:
            break
    return out, cut


def quote(title, message, budget):
    """At most `budget` lines (plus one saying what was left out) of the message's first difference,
    dedented, the case label leading the first line."""
    label, nodes = _body(title, message)
    out, cut = _fill(nodes, budget)
    if not out:
        return [f"({label}) see this check's test below" if label else "see this check's test below"]
    margin = min(len(line) - len(line.lstrip()) for line in out)
    out = [line[margin:].rstrip() for line in out]
    if label:
        out[0] = f"({label}) {out[0]}"
    if cut:
        out.append(f"({' and '.join(cut)}: drawn in this check's test below)")
    elif cut is not None:
        out.append("(the rest of this difference is in this check's test below)")
    return out


def cause(title, message):
    """What a failure's first difference says, without where it happened (action numbers, ids,
    sizes): two checks whose first failures have the same cause failed for the same reason. None
    for an empty message."""
    _, nodes = _body(title, message)
    if not nodes:
        return None
    first = nodes[0]
    said = first.text
    if said.endswith(":") and first.children:
        said += " " + first.children[0].text
    said = re.sub(r"^after (action \d+ of \d+|step \d+), ", "", said)
    said = re.sub(r"\[[\d\s,\[\]]*\]", "[...]", said)
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", said)
