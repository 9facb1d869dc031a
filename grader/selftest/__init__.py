"""The grader's own proof: mutants of the reference, independently written correct variants, and hostile
submissions, graded by `python -m grader.selftest.run`. The corpus is checked in-process (trusted: it is
our own code) by `python -m grader.selftest.verify_corpus`."""
