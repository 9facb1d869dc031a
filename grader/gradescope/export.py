"""Gradescope's "Export Submissions", read as Gradescope writes it: a folder (assignment_<id>_export/)
with submission_metadata.yml at its top and one folder per submission, submission_<id>/, holding
only the student's files. The metadata is staff-side: it says who each folder is, outside anything
a student uploaded.

submission_metadata.yml is YAML as Ruby writes it, keys being symbols:

    submission_409194023:
      :submitters:
      - :name: First Last
        :sid: '123456789'
        :email: first@example.edu
      :score: 2.0                (then :created_at:, :results: holding the results.json, :history:...)

This reads that subset with the standard library (the grader's runtime has no YAML library): each
top-level key (a submission's folder), and in it the `:submitters:` list of mappings of scalars
(plain, 'single-quoted', "double-quoted", on one line or folded over several; [] for none). Every
other key's value (scores, results, history) is skipped by its indentation, never parsed. Anything
else, where the submitters are, is an ExportError naming the line.
"""
import re
from pathlib import Path

METADATA = "submission_metadata.yml"
_KEY = re.compile(r"(?P<key>:?[A-Za-z0-9_][\w.-]*):(?:[ \t]+(?P<value>.*))?$")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
            "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0"}


class ExportError(ValueError):
    """submission_metadata.yml is not what Gradescope writes; the message names the line."""


def read(path):
    """{submission folder: [{"name", "sid", "email"} per submitter]} from a submission_metadata.yml."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeError) as e:
        raise ExportError(f"cannot read {path}: {e}") from None
    return parse(text, str(path))


def _lines(text):
    """(line number, indent, content) of every line that holds something (no blank or comment lines,
    no document markers)."""
    for number, line in enumerate(text.splitlines(), 1):
        content = line.strip()
        if not content or content.startswith("#") or content in ("---", "..."):
            continue
        if "\t" in line[:len(line) - len(line.lstrip())]:
            raise _error(None, number, "a tab in the indentation (YAML indents with spaces)")
        yield number, len(line) - len(line.lstrip(" ")), content


def _error(where, number, what):
    return ExportError(f"{where or 'submission_metadata.yml'}, line {number}: {what}; export the submissions from "
                       "Gradescope again (Assignments > Review Grades > Export Submissions) and unzip it as it is")


def parse(text, where=None):
    """The submitters of every submission in the text of a submission_metadata.yml (see read)."""
    lines = list(_lines(text))
    out, i = {}, 0
    while i < len(lines):
        number, indent, content = lines[i]
        m = _KEY.match(content)
        if indent != 0 or not m or m["value"] not in (None, ""):
            raise _error(where, number, f"expected a submission's folder name and a colon, found {content[:60]!r}")
        folder = m["key"]
        if folder in out:
            raise _error(where, number, f"{folder} appears twice")
        i += 1
        body = []
        while i < len(lines) and lines[i][1] > 0:
            body.append(lines[i])
            i += 1
        out[folder] = _submitters(body, where, number, folder)
    return out


def _submitters(body, where, number, folder):
    """The `:submitters:` list of one submission's block; other keys are skipped by indentation."""
    if not body:
        raise _error(where, number, f"{folder} has nothing under it (no :submitters:)")
    indent = body[0][1]
    found, i = None, 0
    while i < len(body):
        n, ind, content = body[i]
        if ind < indent:
            raise _error(where, n, "indented less than the lines before it")
        listed = ind == indent and content.startswith("- ")     # an item of the previous key's list (Ruby's style)
        m = _KEY.match(content) if ind == indent and not listed else None
        if ind == indent and not listed and not m:
            raise _error(where, n, f"expected a key of {folder}, found {content[:60]!r}")
        i += 1
        if m is None or m["key"] != ":submitters":
            continue                               # another key's value, skipped unread
        if m["value"] not in (None, ""):
            if m["value"].strip() == "[]":
                found = []
                continue
            raise _error(where, n, f"{folder}'s :submitters: is {m['value'][:40]!r}, not a list")
        items = []
        while i < len(body) and (body[i][1] > indent or (body[i][1] == indent and body[i][2].startswith("- "))):
            items.append(body[i])
            i += 1
        found = _list_of_mappings(items, where, n)
    if found is None:
        raise _error(where, number, f"{folder} has no :submitters:")
    return found


def _list_of_mappings(items, where, number):
    """[{key without its colon prefix: scalar}] of a block list of flat mappings (`- :name: x`, then
    `  :sid: 'y'` under it)."""
    if not items or not items[0][2].startswith("- "):
        raise _error(where, number, ":submitters: is not a list")
    dash, key_indent = items[0][1], None
    out, i = [], 0
    while i < len(items):
        n, ind, content = items[i]
        if ind == dash and content.startswith("- "):
            out.append({})
            rest = content[2:].lstrip(" ")
            key_indent, content = ind + len(content) - len(rest), rest
        elif ind != key_indent:
            raise _error(where, n, f"expected a submitter's key at column {key_indent + 1}, found {content[:60]!r}")
        m = _KEY.match(content)
        if not m:
            raise _error(where, n, f"expected a submitter's key (like :sid:), found {content[:60]!r}")
        i += 1
        raw = (m["value"] or "").strip()
        while raw[:1] in ("'", '"') and not _closed(raw) and i < len(items) and items[i][1] > key_indent:
            raw += " " + items[i][2]                    # a quoted scalar folded over several lines
            i += 1
        if not raw and i < len(items) and items[i][1] > key_indent:
            raise _error(where, items[i][0], f"{m['key']} holds more than one value")
        out[-1][m["key"].lstrip(":")] = _scalar(raw, where, n)
    return out


def _closed(raw):
    """Whether the quoted scalar `raw` starts is closed within it ('' and \" are not its end)."""
    quote, j = raw[0], 1
    while j < len(raw):
        if quote == '"' and raw[j] == "\\":
            j += 2
        elif raw[j] == quote and quote == "'" and raw[j + 1:j + 2] == "'":
            j += 2
        elif raw[j] == quote:
            return True
        else:
            j += 1
    return False


def _scalar(raw, where, number):
    """A YAML scalar as a string ("" for null / empty)."""
    if raw.startswith("'"):
        if not _closed(raw):
            raise _error(where, number, "a quote is never closed")
        return raw[1:raw.rfind("'")].replace("''", "'")
    if raw.startswith('"'):
        out, j = [], 1
        while j < len(raw):
            c = raw[j]
            if c == '"':
                return "".join(out)
            if c == "\\" and j + 1 < len(raw):
                e = raw[j + 1]
                if e in "xuU":
                    size = {"x": 2, "u": 4, "U": 8}[e]
                    try:
                        out.append(chr(int(raw[j + 2:j + 2 + size], 16)))
                    except ValueError:
                        raise _error(where, number, f"a bad escape \\{e} in a quoted value") from None
                    j += 2 + size
                    continue
                if e not in _ESCAPES:
                    raise _error(where, number, f"an unknown escape \\{e} in a quoted value")
                out.append(_ESCAPES[e])
                j += 2
                continue
            out.append(c)
            j += 1
        raise _error(where, number, "a quote is never closed")
    raw = re.sub(r"\s+#.*$", "", raw)
    return "" if raw in ("~", "null", "Null", "NULL") else raw
