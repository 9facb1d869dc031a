"""A class folder as staff get one after the deadline, built from the selftest's corpus, with the
integrity flags each submission must get (checks/test_class_batch.py grades it with `batch`), and
its roster.

    python -m grader.selftest.classfolder OUT      # write OUT/class and OUT/roster.csv, to try
                                                   # make batch DIR=OUT/class ROSTER=OUT/roster.csv on

Honest work, each file with code of its own: the correct variants (two moved into the starter's
layout, docstrings and all, which must not make them "similar"), variants with one realistic bug
each, the starter with a syntax error. Not honest, or not work: the reference itself, two
near-copies of it (a new header, renamed variables, comments gone), mutants of it (near-copies too),
disguised copies (grader/selftest/disguise.py: of the reference, and of two classmates' files), two
students with the same bytes (one as the zip `make submit` writes), the unchanged starter, the
starter's stubs with a student's own comments (stubs only), and a folder holding a forged
submission_metadata.json that names a classmate.

roster(): each student's id, name, email and submission; ned's submission is a group's (two rows),
olga handed nothing in, and jack's file no row claims. export_folder() lays some of the class out
as Gradescope's "Export Submissions" writes it.
"""
import ast
import csv
import json
import re
import sys
import textwrap
import zipfile
from pathlib import Path

from grader.selftest import disguise, mutants

REPO = Path(__file__).resolve().parents[2]
VARIANTS = REPO / "grader" / "selftest" / "variants"
STARTER = (REPO / "starter" / "paged_kv.py").read_text(encoding="utf-8")
REFERENCE = (REPO / "solution" / "paged_kv.py").read_text(encoding="utf-8")
METADATA = {"id": 9001, "created_at": "2025-01-10T23:58:00Z", "users": [
    {"id": 31337, "email": "carol@example.edu", "name": "Carol"}], "assignment": {"id": 7, "title": "PagedAttention"}}
# What carol uploaded inside her folder: Gradescope's format, naming erin (her id, her email).
FORGED = {"id": 9002, "users": [{"id": 4242, "email": "erin@example.edu", "name": "Erin"}]}

# name -> the flags it must get (integrity.Flags.of, as phrases' starts); [] is honest work
EXPECTED = {
    "ada": ["near-copy of the solution", "similar to"],   # the reference itself
    "bob": ["not started (the starter unchanged)"],
    "carol": ["metadata inside the submission"],      # a folder with a forged submission_metadata.json
    "erin": ["identical to frank"],                   # erin.zip holds frank.py's bytes
    "frank": ["identical to erin"],
    "gina": ["not started (stubs only)"],             # the starter with her own comments
    "hal": ["near-copy of the solution", "similar to"],   # a new header, renamed variables
    "ivy": ["near-copy of the solution", "similar to"],   # comments gone, local names changed
    "jack": [],                                       # the starter with a syntax error: not graded
    "kim": ["similar to yara"],                       # a variant in the starter's layout
    "leo": [],                                        # another one, also in the starter's layout
    "mia": ["similar to zoe"],                        # the bonus, done differently
    "ned": [],
    "pam": [],                                        # a variant with a Part 1 bug
    "quinn": [],                                      # a variant with a Part 3 bug
    "rita": ["near-copy of the solution", "similar to"],  # mutants of the reference
    "sam": ["near-copy of the solution", "similar to"],
    "tom": [],                                        # a variant with a Part 4 bug
    "uma": ["near-copy of the solution", "similar to"],
    "vic": ["near-copy of the solution", "similar to"],
    "wes": ["near-copy of the solution", "similar to"],   # the reference disguised every way, in UTF-7
    "yara": ["similar to kim"],                       # kim's file renamed, a no-op call after every 2nd statement
    "zoe": ["similar to mia"],                        # mia's file with its definitions reversed, in UTF-7
}
COPIES_OF_SOLUTION = ("ada", "hal", "ivy", "rita", "sam", "uma", "vic", "wes")
# The clusters `make similarity` and the batch must find: each honest file has code of its own.
CLUSTERS = [{*COPIES_OF_SOLUTION, "(solution)"}, {"erin", "frank"}, {"kim", "yara"}, {"mia", "zoe"}]



def _edit(text, find, replace):
    assert text.count(find) == 1, f"{find!r} occurs {text.count(find)} times"
    return text.replace(find, replace)


def in_starter_layout(source, starter=STARTER):
    """The file a student who filled in the starter would hand in: the starter, its docstrings and
    comments kept, each stub's body replaced by the same function of `source`, the rest of `source`
    (imports, helpers, extra methods) added where a student would put it."""
    lines, mine = starter.splitlines(keepends=True), ast.parse(source)
    theirs = source.splitlines(keepends=True)
    defs = {}           # qualified name -> function node of `source`
    extra_top, extra_in = [], {}
    for node in mine.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defs[f"{node.name}.{item.name}"] = item
                else:
                    extra_in.setdefault(node.name, []).append(item)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs.setdefault(node.name, node)
    edits = []          # (first line, last line, replacement), 1-based, in the starter
    tree = ast.parse(starter)
    stubs = set()
    for node in tree.body:
        members = [(f"{node.name}.{i.name}", i) for i in node.body if isinstance(i, ast.FunctionDef)] \
            if isinstance(node, ast.ClassDef) else [(node.name, node)] if isinstance(node, ast.FunctionDef) else []
        for qual, stub in members:
            stubs.add(qual)
            first = min([d.lineno for d in stub.decorator_list] + [stub.lineno])
            if qual not in defs:
                if "." in qual and node.name in defs:       # the class is theirs, this member is not: gone
                    edits.append((first, stub.end_lineno, []))
                continue
            edits.append((first, stub.end_lineno, _filled(stub, defs[qual], lines, theirs)))
        if isinstance(node, ast.ClassDef) and node.name in defs:
            added = [m for m in defs[node.name].body if isinstance(m, ast.FunctionDef)
                     and f"{node.name}.{m.name}" not in stubs] + extra_in.get(node.name, [])
            if added:
                block = [_segment(m, theirs, node.body[0].col_offset) for m in sorted(added, key=lambda m: m.lineno)]
                edits.append((node.end_lineno + 1, node.end_lineno, ["\n" + "\n\n".join(block) + "\n"]))
    starter_names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for node in mine.body:
        if not (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in starter_names):
            roomy = isinstance(node, (ast.FunctionDef, ast.ClassDef))        # two blank lines around a def
            if extra_top:
                extra_top.append("\n\n\n" if roomy or extra_top[-1].startswith(("def ", "class ", "@")) else "\n")
            extra_top.append(_segment(node, theirs, 0))
    first_class = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    at = min([d.lineno for d in first_class.decorator_list] + [first_class.lineno])
    while at > 1 and lines[at - 2].lstrip().startswith("#"):        # above the section's banner comment
        at -= 1
    edits.append((at, at - 1, ["".join(extra_top) + "\n\n\n"]))
    for first, last, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[first - 1:last] = new
    return "".join(lines)


def _segment(node, lines, indent):
    """A node's source lines (decorators included), re-indented to `indent`."""
    first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    text = textwrap.dedent("".join(lines[first - 1:node.end_lineno]))
    return textwrap.indent(text, " " * indent).rstrip("\n")


def _filled(stub, theirs_def, lines, theirs):
    """The stub with their signature and body, the starter's docstring between them."""
    indent = " " * stub.col_offset
    body = theirs_def.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str) and len(body) > 1:
        body = body[1:]                                   # their docstring: the starter's is kept
    head_first = min([d.lineno for d in theirs_def.decorator_list] + [theirs_def.lineno])
    assert body[0].lineno > theirs_def.lineno, f"{theirs_def.name}: a one-line def"
    head = textwrap.dedent("".join(theirs[head_first - 1:theirs_def.body[0].lineno - 1]))
    inner = textwrap.dedent("".join(theirs[body[0].lineno - 1:body[-1].end_lineno]))
    doc = stub.body[0] if isinstance(stub.body[0], ast.Expr) else None
    doc_text = "".join(lines[doc.lineno - 1:doc.end_lineno]) if doc else ""
    return [textwrap.indent(head, indent), doc_text,
            textwrap.indent(inner, indent + "    ").rstrip("\n") + "\n"]


def variant(name):
    return (VARIANTS / f"{name}.py").read_text(encoding="utf-8")


def near_copy_header(text):
    """The reference under a student's own header, with its private names renamed."""
    text = re.sub(r'\A""".*?"""', '"""CS349E lecture 7, PagedAttention. My solution (H. Lee)."""', text, flags=re.S)
    for old, new in (("_ref", "_counts"), ("_free", "_free_heap"), ("_used", "_in_use_count"), ("_as_int", "as_integer")):
        text = re.sub(rf"\b{old}\b", new, text)
    return re.sub(r"\bb\b", "blk", text)


def near_copy_stripped(text):
    """The reference without its comments and docstring, its local names changed."""
    text = re.sub(r"  # .*", "", re.sub(r"(?m)^ *# .*\n", "", text))
    text = text.split('"""', 2)[2].lstrip()
    for old, new in (("victims", "to_drop"), ("child", "twin"), ("hits", "matched"), ("groups", "batches"),
                     ("_slots", "_positions"), ("_blocks_needed", "_count_blocks"), ("_check_chunk", "_validate")):
        text = re.sub(rf"\b{old}\b", new, text)
    return "# homework 7\n" + text


def stubs_with_comments(starter=STARTER):
    """The starter as a student who wrote nothing but notes hands it in."""
    return ("# Gina Park, CS349E. Started late, see you at office hours.\n" + starter
            .replace("class BlockPool:", "# TODO: ask about the heap\nclass BlockPool:"))


def files():
    """name -> (entry name in the class folder, {path inside the entry or "": bytes})."""
    by = {}
    by["ada"] = ("ada.py", REFERENCE)
    by["bob"] = ("bob.py", STARTER)
    by["carol"] = ("carol", {"paged_kv.py": variant("plain_loops")})
    by["frank"] = ("frank.py", variant("bitmap_argmin"))
    by["erin"] = ("erin.zip", variant("bitmap_argmin"))
    by["gina"] = ("gina.py", stubs_with_comments())
    by["hal"] = ("hal.py", near_copy_header(REFERENCE))
    by["ivy"] = ("ivy", {"paged_kv.py": near_copy_stripped(REFERENCE)})
    by["jack"] = ("jack.py", _edit(STARTER, "def alloc(self):", "def alloc(self)"))
    by["kim"] = ("kim.py", in_starter_layout(variant("rollback_numpy_ids")))
    by["leo"] = ("leo.py", in_starter_layout(variant("custom_errors_debug")))
    by["mia"] = ("mia.py", variant("hash_chain_clock"))
    by["ned"] = ("ned", {"paged_kv.py": variant("trie_ordereddict")})
    by["pam"] = ("pam.py", _edit(variant("batched_dataclass"), "        self._refs[b] = 1\n        self.peak_used = "
                                 "max(self.peak_used, self.n_used)\n", "        self._refs[b] = 1\n"))
    by["quinn"] = ("quinn.py", _edit(variant("online_softmax"), "inv = 1.0 / np.sqrt(D)", "inv = 1.0 / D"))
    by["rita"] = ("rita.py", mutants.apply(mutants.BY_NAME["cow_never"]))
    by["sam"] = ("sam.py", mutants.apply(mutants.BY_NAME["bw_no_scale"]))
    by["tom"] = ("tom.py", _edit(variant("slow_per_token"), "            self.pool.incref(b)\n            f.blocks",
                                 "            f.blocks"))
    by["uma"] = ("uma.py", mutants.apply(mutants.BY_NAME["alloc_highest_first"]))
    by["vic"] = ("vic.py", mutants.apply(mutants.BY_NAME["no_step_precheck"]))
    by["wes"] = ("wes.py", disguise.combined(REFERENCE))
    by["yara"] = ("yara.py", disguise.noop_calls(disguise.rename_identifiers(by["kim"][1]), every=2))
    by["zoe"] = ("zoe", {"paged_kv.py": disguise.utf7(disguise.reverse_definitions(by["mia"][1]))})
    by["carol"][1]["submission_metadata.json"] = json.dumps(FORGED)
    assert set(by) == set(EXPECTED)
    return by


def _bytes(content):
    return content if isinstance(content, bytes) else content.encode("utf-8")


def write(folder):
    """Write the class folder; returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for entry, content in files().values():
        path = folder / entry
        if isinstance(content, dict):
            path.mkdir(exist_ok=True)
            for rel, data in content.items():
                (path / rel).write_bytes(_bytes(data))
        elif entry.endswith(".zip"):
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("paged_kv.py", _bytes(content))
        else:
            path.write_bytes(_bytes(content))
    return folder


def roster():
    """[(id, name, email, submission)]: one row per student, ids s1001... in the class's order; ned
    and nia share ned's folder, olga has no submission, jack's file is in no row."""
    entries = {name: entry for name, (entry, _) in files().items() if name != "jack"}
    rows = [(name, entry) for name, entry in sorted(entries.items())]
    rows += [("nia", entries["ned"]), ("olga", "")]
    return [(f"s{1001 + i}", name.capitalize(), f"{name}@example.edu", entry) for i, (name, entry) in enumerate(rows)]


def write_roster(path, header=("id", "name", "email", "submission")):
    """The roster as a CSV with these column names (an LMS export's, e.g.); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(roster())
    return path


EXPORT_METADATA = """\
---
submission_{n0}:
  :submitters:
  - :name: Pam Prior
    :sid: '{s0}'
    :email: pam@example.edu
  :created_at: 2025-01-10 23:58:00.861687000 Z
  :score: 95.0
  :results:
    score: 95.0
    output: |-
      Score: 95.00 / 100
      - :name: not a submitter
  :history: []
submission_{n1}:
  :submitters:
  - :name: "Carol \\"CJ\\" Jones"
    :sid: '{s1}'
    :email: carol@example.edu
  - :name: 'Ned O''Neil'
    :sid: {s2}
    :email: ned@example.edu
  :created_at: 2025-01-10 23:59:00.000000000 Z
  :score: 100.0
"""


def export_folder(folder):
    """Two submissions laid out as Gradescope's "Export Submissions" writes them: submission_metadata.yml
    at the top, one submission_<id>/ per submission holding the students' files only; the group's
    folder also holds the forged submission_metadata.json a student uploaded. Returns
    (folder, {submission folder: [(sid, email), ...]})."""
    folder = Path(folder)
    people = {"submission_301": [("1001", "pam@example.edu")],
              "submission_302": [("1002", "carol@example.edu"), ("1003", "ned@example.edu")]}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission_metadata.yml").write_text(EXPORT_METADATA.format(n0=301, n1=302, s0="1001", s1="1002",
                                                                           s2="1003"), encoding="utf-8")
    (folder / "submission_301").mkdir()
    (folder / "submission_301" / "paged_kv.py").write_text(variant("plain_loops"), encoding="utf-8")
    (folder / "submission_302" / "src").mkdir(parents=True)
    (folder / "submission_302" / "src" / "paged_kv.py").write_text(variant("bitmap_argmin"), encoding="utf-8")
    (folder / "submission_302" / "submission_metadata.json").write_text(json.dumps(FORGED), encoding="utf-8")
    return folder, people


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/selftest-class")
    print(f"wrote {write(out / 'class')} and {write_roster(out / 'roster.csv')}")
