"""A pytest plugin that records, for every hidden case, its check and whether it passed, and at the
end what the hidden suites' Grading kept for staff (the sandbox's notes, calls the machine failed).

Positive evidence only: a case counts as passed when its call phase reported "passed". Anything
else (failed, skipped, errored in setup, never run) is a failure.

Also, per check whose sandbox reply was a stub's NotImplementedError("TODO Part N ...") (the worker
sends N alone, validated by sandbox.py): N. grade.py uses it only to say "bonus not attempted" of a
bonus part that scored nothing.
"""

from grader import score
from grader.feedback import END, GROUP, TRUSTED, VALUE


class Collector:
    def __init__(self):
        self.checks = {}        # nodeid -> check id, for every collected case
        self.drawn = set()      # nodeids of the cases drawn from the seed (conftest.drawn_flags)
        self.outcomes = {}      # nodeid -> (passed, message)
        self.errors = []        # problems of the grader itself (collection errors)
        self.todo_parts = {}    # check id -> N: its reply was a stub's NotImplementedError("TODO Part N")
        self.staff = []         # the sandbox's lines for staff (grader/hidden/conftest.py: Grading.staff_lines)
        self.grader_errors = []  # (check id, why): calls the machine failed; no score may be made of this run

    def pytest_collection_modifyitems(self, items):
        for item in items:
            marker = item.get_closest_marker("check")
            if marker:
                self.checks[item.nodeid] = marker.args[0]
                if marker.kwargs.get("drawn"):
                    self.drawn.add(item.nodeid)

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"collecting {report.nodeid}: {report.longreprtext[-2000:]}")

    def pytest_runtest_logreport(self, report):
        if report.nodeid not in self.checks:
            return
        if report.when == "call" or report.outcome != "passed":
            passed = report.when == "call" and report.outcome == "passed"
            if report.nodeid not in self.outcomes or not passed:
                self.outcomes[report.nodeid] = (passed, "" if passed else _message(report))

    def pytest_sessionfinish(self, session):
        grading = getattr(session.config, "grading", None)
        self.todo_parts = dict(getattr(grading, "todo_parts", {}))
        if grading is not None:
            self.staff, self.grader_errors = grading.staff_lines(), list(grading.grader_errors)

    def by_check(self):
        """check id -> [(passed, message)] over the cases its score is made of (score.counted: a drawn
        case only once every core case passed); a case that never reported fails."""
        out = {}
        for nodeid, check in self.checks.items():
            outcome = self.outcomes.get(nodeid, (False, "this case did not run"))
            out.setdefault(check, []).append((outcome, nodeid in self.drawn))
        return {check: score.counted([o for o, _ in pairs], [d for _, d in pairs]) for check, pairs in out.items()}


def _message(report):
    if report.skipped:
        return "this case was skipped"
    text = report.longreprtext.strip(" \t\r\n")
    if report.when != "call":
        return f"grader error while setting up this case: {text.splitlines()[-1] if text else ''}"
    return _closed(text)[-4000:]


_OPEN, _END = VALUE + TRUSTED + GROUP, END      # tests/explain.py's marks, as feedback.py reads them


def _closed(text):
    """The message with the ends of its marks that pytest's report dropped put back: a message ending
    with a value ("...: AttributeError") loses its last END there, as Python counts \x1f as whitespace,
    and an unclosed mark would show nothing."""
    return text + _END * max(0, sum(text.count(c) for c in _OPEN) - text.count(_END))
