"""The proofs over a corpus's records (grader/selftest/proofs.py) on small records made up here, each
expected verdict worked out from the record by hand."""
from grader.selftest import proofs

NUMBERS = {"allocator": 1, "paged_step": 2, "blockwise_attention": 3, "copy_on_write": 4, "prefix_cache": 5}
PARTS = tuple(NUMBERS)


def rec(name, parts, seeds, public=None, messages=None):
    """A record: seeds {seed: {part: points lost}} (None: not graded), each part's loss in one check
    PART.c whose message is messages.get(part, "")."""
    out = {}
    for s, lost in seeds.items():
        if lost is None:
            out[s] = {"lost": None, "checks": {}, "messages": {}, "problems": ["died"]}
            continue
        full = {p: lost.get(p, 0.0) for p in PARTS}
        out[s] = {"lost": full, "checks": {f"{p}.c": x for p, x in lost.items()},
                  "messages": {f"{p}.c": (messages or {}).get(p, "") for p, x in lost.items() if x > 0},
                  "problems": []}
    return {"name": name, "corpus": "generated", "part": parts[0], "parts": list(parts), "kind": "cmp",
            "bug": "", "public": public or {}, "seeds": out}


def test_kill_needs_a_loss_on_every_graded_seed():
    records = [rec("always", ["allocator"], {"0": {"allocator": 1}, "1": {"allocator": 2}}),
               rec("twice", ["allocator"], {"0": {"allocator": 1}, "1": {}, "2": {"allocator": 0.5}}),
               rec("never", ["paged_step"], {"0": {}, "1": {}}),
               rec("died", ["paged_step"], {"0": {"paged_step": 3}, "1": None})]
    assert proofs.kill_violations(records) == [("twice", ["1"]), ("never", ["0", "1"])]
    assert proofs.kill_violations(records, equivalent={"never"}) == [("twice", ["1"])]


def test_the_public_tests_are_an_oracle_for_the_hidden_points_of_their_part():
    records = [rec("m", ["copy_on_write"], {"0": {"copy_on_write": 2}, "1": {"paged_step": 1}},
                   public={"copy_on_write": ["test_fork"], "paged_step": ["test_x"], "(run)": ["crashed"]}),
               rec("ok", ["allocator"], {"0": {"allocator": 2}}, public={"allocator": ["test_a"]})]
    assert proofs.oracle_violations(records) == [("m", "copy_on_write", ["1"]), ("m", "paged_step", ["0"])]


def test_a_cascade_is_excused_only_when_every_outside_loss_names_the_bugs_own_part():
    named = rec("named", ["allocator"], {"0": {"allocator": 3, "paged_step": 4}},
                messages={"paged_step": "0 of 2 cases passed.\nyour BlockPool(...) raised: fix Part 1 (BlockPool) first"})
    other = rec("other", ["allocator"], {"0": {"allocator": 3, "paged_step": 4}},
                messages={"paged_step": "needs a paged_step that runs (Part 2): fix Part 3 first"})
    silent = rec("silent", ["paged_step", "prefix_cache"], {"0": {"paged_step": 1, "prefix_cache": 1},
                                                           "1": {"paged_step": 1, "copy_on_write": 0.5}})
    inside = rec("inside", ["paged_step", "prefix_cache"], {"0": {"paged_step": 1, "prefix_cache": 2}})
    records = [named, other, silent, inside]
    assert proofs.cascades(records, NUMBERS) == [
        ("named", {"0": {"paged_step": 4}}, True), ("other", {"0": {"paged_step": 4}}, False),
        ("silent", {"1": {"copy_on_write": 0.5}}, False)]
    assert proofs.cascade_violations(records, NUMBERS) == [("other", {"0": {"paged_step": 4}}),
                                                            ("silent", {"1": {"copy_on_write": 0.5}})]


def test_the_seed_spread_is_the_range_of_the_totals():
    records = [rec("wide", ["allocator"], {"0": {"allocator": 10}, "1": {"allocator": 10, "paged_step": 2.5},
                                           "2": None}),
               rec("edge", ["allocator"], {"0": {"allocator": 10}, "1": {"allocator": 12}})]
    assert proofs.spread(records[0]) == 2.5 and proofs.spread(records[1]) == 2.0
    assert proofs.spread_violations(records, limit=2.0) == [("wide", 2.5, {"0": 10.0, "1": 12.5})]


def test_every_got_nonetype_line_is_listed():
    records = [rec("n", ["paged_step"], {"0": {"paged_step": 1}, "1": {"paged_step": 1}},
                   messages={"paged_step": "case 1: expected list, got NoneType\ncase 2: expected 3, got 4"})]
    assert proofs.nonetype_messages(records) == [("n", "0", "paged_step.c", "case 1: expected list, got NoneType"),
                                                 ("n", "1", "paged_step.c", "case 1: expected list, got NoneType")]


def test_the_summary_counts_each_figure_once():
    records = [rec("a", ["allocator"], {"0": {"allocator": 1}, "1": {"allocator": 4}}),
               rec("b", ["allocator"], {"0": {}, "1": {}}, public={"allocator": ["t"]}),
               rec("c", ["paged_step"], {"0": {}, "1": {}}),
               rec("d", ["paged_step"], {"0": {"paged_step": 1}, "1": {}}),
               rec("e", ["paged_step"], {"0": {"paged_step": 1, "prefix_cache": 1}, "1": {"paged_step": 1}})]
    s = proofs.summary(records, NUMBERS, {"prefix_cache"}, equivalent={"c": "dead code"})
    assert (s["mutants"], s["killed_every_seed"], s["killed_some_seeds"], s["not_killed"]) == (5, 2, ["d"], 2)
    assert (s["failing_public_only"], s["survivors"], s["equivalent_listed"]) == (["b"], ["c"], ["c"])
    assert s["survivors_not_equivalent"] == []
    assert s["cascade"] == {"overall": 1, "within_core": 0, "into_bonus": 1, "named": 0}
    assert s["spread"] == {"median": 1.0, "max": 3.0} and [x["name"] for x in s["spread_over_2"]] == ["a"]
    assert [(o["name"], o["part"], o["own"]) for o in s["oracle_violations"]] == [("b", "allocator", True)]


def test_a_second_oracle_that_could_not_run_is_no_kill():
    """verify_corpus's verdict on a survivor: its failures (a blind spot), none (equivalent as far as it
    can tell), or the child that ran it died: then it is counted apart, never as a kill."""
    caught, clean, died = (rec(n, ["paged_step"], {"0": {}, "1": {}}) for n in ("caught", "clean", "died"))
    caught["second_oracle"], clean["second_oracle"], died["second_oracle"] = ["pc_hits: TypeError"], [], \
        {"problem": "the child died (exit 1)"}
    s = proofs.summary([caught, clean, died], NUMBERS, {"prefix_cache"})
    assert (s["survivors_second_oracle_kills"], s["survivors_second_oracle_not_run"]) == (["caught"], ["died"])
    assert "1 failing verify_corpus's checks, 1 it could not check)" in proofs.render("t", s)


def test_violations_lists_each_failed_proof_once_and_a_clean_corpus_none():
    clean = [rec("a", ["allocator"], {"0": {"allocator": 1}, "1": {"allocator": 2}}, public={"allocator": ["t"]}),
             rec("eq", ["paged_step"], {"0": {}, "1": {}}),
             rec("named", ["allocator"], {"0": {"allocator": 3, "paged_step": 4}, "1": {"allocator": 3, "paged_step": 4}},
                 messages={"paged_step": "pool raised: fix Part 1 first"})]
    assert proofs.violations(clean, NUMBERS, equivalent={"eq"}) == []
    broken = [rec("died", ["allocator"], {"0": {"allocator": 1}, "1": None}),
              rec("spared", ["paged_step"], {"0": {"paged_step": 1}, "1": {}}, public={"paged_step": ["t"]}),
              rec("wide", ["paged_step"], {"0": {"paged_step": 1}, "1": {"paged_step": 4, "prefix_cache": 1}},
                  messages={"paged_step": "got NoneType"})]
    lines = proofs.violations(broken, NUMBERS)
    assert [line.split(":")[0] for line in lines] == ["not graded on seeds ['1']", "kill", "oracle", "cascade",
                                                      "spread", "NoneType", "NoneType"], lines   # a line per seed
    assert all(name in line for line, name in zip(lines, ["died", "spared", "spared", "wide", "wide", "wide", "wide"]))
