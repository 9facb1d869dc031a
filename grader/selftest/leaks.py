"""What the feedback-leak submissions (hostile.py, "leak_*") read back of the hidden inputs.

    python -m grader.selftest.leaks RESULTS.json [--seed N]

The trusted side knows the hidden tokens of a seed: it rebuilds the plans here, as the hidden suites
do. A leak submission hides the tokens of every scenario call in the fields the judges print (ids,
counts, lengths, logits); this reads results.json as its author would: the numbers of everything a
student sees (`output` and every test's `output`), taken in order, those after "length ", those in
the cells of a drawn table, and every large one unpacked into 8-bit tokens; and counts the hidden
tokens that come out in a run of at least RUN consecutive tokens of one case (shorter runs happen
by chance among the small numbers feedback prints anyway). Each hidden token counts once. A float is
read by its significant digits; an exit status, which carries one token a message, per check
(`statuses`).
"""
import argparse
import json
import re
import sys

from grader import paths, rubric

RUN = 4


def case_tokens(inputs, key=None, out=None):
    """The hidden tokens of one case's inputs (chunks, prompts, requests), in order."""
    out = [] if out is None else out
    if isinstance(inputs, dict):
        for k, v in inputs.items():
            case_tokens(v, k, out)
    elif key == "prompt" and isinstance(inputs, (list, tuple)):
        out.extend(int(t) for t in inputs)
    elif isinstance(inputs, (list, tuple)):
        if inputs and inputs[0] in ("step", "fit", "miss") and len(inputs) > 2:
            for chunk in inputs[2]:
                out.extend(int(t) for t in chunk)
        elif inputs and inputs[0] in ("request", "lookup", "seq", "bad_prefill"):
            for a in inputs[1:]:
                if isinstance(a, list):
                    out.extend(int(t) for t in a)
        else:
            for v in inputs:
                case_tokens(v, None, out)
    return out


def plans(seed):
    """{check id: its hidden cases' tokens, one list per case that has any}, for every check graded, at
    this seed (inprocess.cases: as the hidden suites draw them)."""
    paths.trusted_imports()
    from grader.selftest import inprocess
    return {c: [t for t in (case_tokens(case.inputs) for case in inprocess.cases(c, seed)) if t] for c in rubric.CHECKS}


def hidden_tokens(seed):
    """Every hidden case's tokens, one list per case, for this seed."""
    return [tokens for lists in plans(seed).values() for tokens in lists]


def student_text(results):
    """What a student reads of a results.json (extra_data is staff-only)."""
    return "\n".join([results.get("output", "")] + [t.get("output", "") for t in results.get("tests", [])])


_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:e([+-]?\d+))?(?![\w.])")


def _digits(text):
    """A printed number as an attacker reads it: an int as it is, a float by its significant digits
    (0.1234 -> 1234, 1.07e-05 -> 107), which is all a float's 4 printed digits can carry."""
    mantissa, exponent = text
    if "." not in mantissa and not exponent:
        return int(mantissa)
    return int(mantissa.replace(".", "").lstrip("0") or "0")


def streams(text):
    """The number sequences an attacker reads from the feedback: every number in order (floats by their
    digits), the large ones unpacked into bytes, the lengths, the cells of drawn tables."""
    every = [_digits(m) for m in _NUMBER.findall(text)]
    unpacked = [(n >> (8 * i)) & 255 for n in every if n > 255 for i in range(8) if n >> (8 * i)]
    return [every, unpacked, [int(n) for n in re.findall(r"length (\d+)", text)],
            [int(n) for n in re.findall(r"\[ (\d+) ", text)]]


def statuses(results, seed):
    """How many checks' feedback shows, as the worker's exit status or signal, the first hidden token of
    the check's first case (what leak_tokens_as_exits makes its worker exit with): one token a message
    at most, so no run, read per check."""
    from grader import report
    first = {report.test_name(rubric.CHECKS[c]): lists[0][0] for c, lists in plans(seed).items() if lists}
    read = 0
    for test in results.get("tests", []):
        shown = {int(n) for n in re.findall(r"(?:exited with status|killed by signal) (\d+)", test.get("output", ""))}
        read += first.get(test.get("name")) in shown
    return read


def leaked(results, seed):
    """{"tokens": hidden tokens read back, "longest": the longest run}, for one results.json."""
    lists = hidden_tokens(seed)
    starts = {}
    for c, tokens in enumerate(lists):
        for i in range(len(tokens) - RUN + 1):
            starts.setdefault(tuple(tokens[i:i + RUN]), []).append((c, i))
    covered, longest = set(), 0
    for stream in streams(student_text(results)):
        for j in range(len(stream) - RUN + 1):
            for c, i in starts.get(tuple(stream[j:j + RUN]), ()):
                n = RUN
                while j + n < len(stream) and i + n < len(lists[c]) and stream[j + n] == lists[c][i + n]:
                    n += 1
                covered.update((c, i + k) for k in range(n))
                longest = max(longest, n)
    return {"tokens": len(covered), "longest": longest, "statuses": statuses(results, seed)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        print(json.dumps(leaked(json.load(f), args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
