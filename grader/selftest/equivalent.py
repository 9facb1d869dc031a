"""Generated mutants judged equivalent by reading them: they change only behaviour the contract does not
grade ("What is not graded": wrong-type inputs, error wording, views vs copies) or code no graded input
reaches, so no grader can kill them. Strict: a mutant is listed only when the graded behaviour cannot
differ, with the reason in one line. A listed mutant the grader kills is reported (proofs.summary:
equivalent_but_killed), so a wrong entry shows up.

EQUIVALENT: the reference's (python -m grader.selftest.generate); VARIANTS: {variant: {name: why}}.
"""
EQUIVALENT = {
}

VARIANTS = {
}


def for_source(name):
    """The table of a source: "solution" or a variant's name."""
    return EQUIVALENT if name == "solution" else VARIANTS.get(name, {})
