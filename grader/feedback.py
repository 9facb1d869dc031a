"""How much the hidden feedback explains: the level staff choose, and the bound on what a student learns.

The judges write their messages with tests/explain.py, which marks every value of the submission's
answer (validated against its field's range first, and tagged with the bits it can carry: how many
renderings its field has), every value of the reference, and every drawn table. Once a
submission is graded, `finish` resolves the marks of the messages a student will read (report.feedback
shows the first MAX_FEEDBACK distinct ones of each check) at one level:

  full    the explanation: place, field, expected vs got, tables drawn; the submission's values are
          shown up to MESSAGE_BITS per message and PART_BITS per part (the first message of every
          failing check of a part first, then the second ones...); from the first value that does
          not fit on, the rest of the message shows "…", with a note
  brief   what differed, without values: the place and the field; every value and drawing left out
  points  points only: how many cases of each check passed, no message

`bound_bits(level)` is the most a student can learn about the hidden inputs from one submission's
feedback at that level (README, "What a student can learn from the feedback").
"""
import json
import math

from grader import paths, rubric
from grader.report import MAX_FEEDBACK

paths.trusted_imports()
from explain import END, GROUP, TRUSTED, VALUE, range_note  # noqa: E402  (tests/ is on sys.path now)

LEVELS = ("full", "brief", "points")
DEFAULT = "full"
MESSAGE_BITS = 256          # bits of the submission's values shown in one message, at "full"
PART_BITS = 640             # ... and in all the messages of one part
HELD = "…"
BRIEF_NOTE = "(the course shows what differed, without values)"
POINTS_NOTE = "(the course shows points only: which cases fail, and why, is not shown)"
# Besides its values, a message says where the answer first differs: which case of the check (at
# most MOST_CASES) and how many share the message, which action of its script (at most 256), which
# field or rule (at most 32); and at "full", where it stops showing values (at most PIECES values
# or drawings are shown). A check's test also says how many of its cases passed, and how many
# failing ones it does not show.
MOST_CASES = 8
PIECES = 31
PLACE_BITS = 2 * math.ceil(math.log2(MOST_CASES + 1)) + 8 + 5
STOP_BITS = math.ceil(math.log2(PIECES + 1))
COUNT_BITS = math.log2(MOST_CASES + 1)


def level_from(config_path):
    """The level a staff config file (config.json of the autograder zip) sets: {"feedback": level}."""
    try:
        with open(config_path, encoding="utf-8") as f:
            level = json.load(f).get("feedback", DEFAULT)
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"cannot read the feedback level from {config_path}: {e}") from None
    if level not in LEVELS:
        raise ValueError(f"{config_path}: feedback level {level!r} is not one of {', '.join(LEVELS)}")
    return level


def finish(rows, level=DEFAULT):
    """The score rows (grader.score) with every failure message resolved at `level`."""
    if level not in LEVELS:
        raise ValueError(f"feedback level {level!r}: one of {', '.join(LEVELS)}")
    left = dict.fromkeys(rubric.ALL_PARTS, PART_BITS)
    seen = {part: set() for part in rubric.ALL_PARTS}       # texts the part's messages have shown so far
    said = [{} for _ in rows]
    order = []                      # (round, row, message): every check's first shown message, then seconds...
    for r, row in enumerate(rows):
        if row["cases"]:            # (a check not graded at all keeps the grader's one message)
            for k, message in enumerate(dict.fromkeys(row["failures"])):
                order.append((k, r, message))
    for k, r, message in sorted(order, key=lambda x: (rubric.ALL_PARTS.index(rows[x[1]]["check"].part), x[0], x[1])):
        part = rows[r]["check"].part
        said[r][message] = resolve(message, level, left, part, spend=k < MAX_FEEDBACK, seen=seen[part])
    if level == "points":           # one note per failing check: no message, no count of messages
        return [{**row, "failures": [POINTS_NOTE] if row["cases"] and row["failures"] else row["failures"]}
                for row in rows]
    return [{**row, "failures": [said[r].get(m, m) for m in row["failures"]]} for r, row in enumerate(rows)]


def resolve(text, level, left, part, spend=True, seen=None):
    """One message at `level`: marks resolved, the bits shown counted against `left[part]` and
    MESSAGE_BITS (only when `spend`: a message that will not be shown shows nothing). `seen`: the texts
    the part's earlier messages showed (resolved in a fixed order, so a reader knows them too): a value
    that repeats one costs only which of them it is, here as within one message; it grows with what
    this message shows."""
    if level == "points":
        return ""
    seen = set() if seen is None else seen
    state = {"level": level, "left": left, "part": part, "spend": spend, "spent": 0, "seen": seen,
             "pieces": 0, "held": False, "elided": False}
    lines = [line for line in _render(_parse(text), state).split("\n") if line.strip() != DROPPED]
    notes = [f"  {note}" for note, due in ((range_note(), state["held"]), (BRIEF_NOTE, state["elided"])) if due]
    at = next((i for i, line in enumerate(lines) if line.startswith("Read assignment.md")), len(lines))
    return "\n".join(lines[:at] + notes + lines[at:])


DROPPED = "\x00"        # a drawing left out: its line goes


def _parse(text):
    """The marks of a message as a tree: ("text", s), ("trusted", s), ("value", bits, s) and
    ("group", kind, bits, children). A message cut short (collect.py keeps its last 4000 characters)
    may start inside a mark: everything before that mark's end is dropped, as if held."""
    root = []
    stack = [root]                      # the children of the groups open here, the message first
    i = 0
    while i < len(text):
        c = text[i]
        if c in (VALUE, TRUSTED):
            end = text.find(END, i)
            if end < 0:
                break
            stack[-1].append(("value", _bits(text[i + 1:i + 4]), text[i + 4:end]) if c == VALUE
                             else ("trusted", text[i + 1:end]))
            i = end + 1
        elif c == GROUP:
            children = []
            stack[-1].append(("group", text[i + 1:i + 2], _bits(text[i + 2:i + 5]), children))
            stack.append(children)
            i += 5
        elif c == END:
            if len(stack) > 1:
                stack.pop()
            else:                       # the end of a mark whose start was cut off
                root[:] = [("text", HELD)]
            i += 1
        else:
            j = min([k for k in (text.find(m, i) for m in (VALUE, TRUSTED, GROUP, END)) if k >= 0], default=len(text))
            stack[-1].append(("text", text[i:j]))
            i = j
    if len(stack) > 1:                  # a group left open: dropped whole
        root[:] = [n for n in root if not (n[0] == "group" and n[3] is stack[1])]
    return root


def _bits(digits):
    return int(digits) if len(digits) == 3 and digits.isdigit() else 999


def _cost(node, seen):
    """The bits a node costs where it is shown: a value one more than its field's, or, when the message
    has already shown the very same text, just which of the texts shown so far it repeats; a group
    its shape's bits plus its children's. The choices of a value's text have 2**-cost summing to at
    most 1 (half for new texts, half for repeats), so what a message shows is at most its cost."""
    if node[0] == "value":
        text = node[2]
        if text in seen:
            return math.ceil(math.log2(len(seen))) + 1 if len(seen) > 1 else 1
        seen.add(text)
        return node[1] + 1
    if node[0] == "group":
        return node[2] + sum(_cost(child, seen) for child in node[3])
    return 0


def _render(nodes, state):
    out = []
    for node in nodes:
        kind = node[0]
        if kind == "text":
            out.append(node[1])
        elif kind == "trusted":
            out.append(node[1] if state["level"] == "full" else HELD)
            state["elided"] |= state["level"] != "full"
        elif state["level"] == "brief":
            state["elided"] = True
            out.append(DROPPED if kind == "group" and node[1] == "D" else HELD)
        elif kind == "group" and node[2] == 0:           # a drawing of the reference's: free
            out.append(_render(node[3], state))
        else:           # shown while it fits; from the first that does not, nothing more (so holding says little)
            seen = set(state["seen"])
            cost = _cost(node, seen)
            state["pieces"] += 1
            if state["spend"] and not state["held"] and state["pieces"] <= PIECES \
                    and state["spent"] + cost <= MESSAGE_BITS and cost <= state["left"][state["part"]]:
                state["spent"] += cost
                state["left"][state["part"]] -= cost
                state["seen"].update(seen)
                out.append(node[2] if kind == "value" else _render_paid(node[3]))
            else:
                state["held"] = True
                out.append({"value": HELD, "L": "[…]", "R": "(not drawn)", "D": DROPPED}.get(
                    kind if kind == "value" else node[1], HELD))
    return "".join(out)


def _render_paid(nodes):
    """A group already paid for: its text, every mark inside resolved."""
    out = []
    for node in nodes:
        out.append(node[1] if node[0] in ("text", "trusted") else node[2] if node[0] == "value"
                   else _render_paid(node[3]))
    return "".join(out)


def bound_bits(level, checks=None):
    """The most one submission's feedback can tell about the hidden inputs, in bits: per check its
    score (how many of at most MOST_CASES cases passed) and, but at "points", how many failing cases
    it leaves unsaid; per message shown (MAX_FEEDBACK per check) its place, plus at "full" where it
    stops showing values, and the values shown (PART_BITS per part)."""
    checks = list(rubric.CHECKS.values() if checks is None else checks)
    if level == "points":
        return len(checks) * COUNT_BITS
    messages = len(checks) * MAX_FEEDBACK
    if level == "brief":
        return len(checks) * 2 * COUNT_BITS + messages * PLACE_BITS
    values = len({c.part for c in checks}) * PART_BITS
    return len(checks) * 2 * COUNT_BITS + messages * (PLACE_BITS + STOP_BITS) + values
