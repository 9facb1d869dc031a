"""The course secret: what makes a student's hidden inputs unknowable from the repository alone.

A student's seed is HMAC-SHA256(secret, the student's key), so anyone holding the grader's source
(a leaked repository, a student who reads it) still cannot rebuild any student's inputs without
the secret. Staff set it once per term and keep it (a password manager): the same secret gives the
same inputs to a resubmission, a regrade and the offline batch. Lost, a new one gives every student
new inputs at the next grading (a correct solution scores the same; which hidden case a buggy one
fails may change).

Where it comes from, first found: a file (--secret-file PATH, the Makefile's SECRET=path), else the
environment variable CS349E_COURSE_SECRET. `make autograder` bakes it into build/autograder.zip
(staff-only: uploaded to Gradescope, never given to students), where run_autograder reads it.
"""
import hashlib
import hmac
import os
import secrets
from pathlib import Path

ENV = "CS349E_COURSE_SECRET"
FILE_IN_ZIP = "course_secret"      # in the autograder zip, beside config.json
MIN_LENGTH = 16
HOW = (f"set {ENV} or give a file holding it (SECRET=path for make, --secret-file for python -m grader); "
       "make one once per term with: python3 -c \"import secrets; print(secrets.token_urlsafe(32))\"")


class SecretError(ValueError):
    """No usable course secret; the message says how to set one."""


def load(secret_file=None, required=True):
    """The course secret as bytes: from `secret_file`, else the environment. None when there is
    none and it is not `required`; SecretError when required and absent, or too short."""
    if secret_file:
        try:
            text = Path(secret_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeError) as e:
            raise SecretError(f"cannot read the course secret from {secret_file}: {e}") from None
        where = str(secret_file)
    else:
        text, where = os.environ.get(ENV, "").strip(), ENV
    if not text:
        if required:
            raise SecretError(f"no course secret ({'empty file ' + where if secret_file else ENV + ' is not set'}): "
                              + HOW)
        return None
    if len(text) < MIN_LENGTH:
        raise SecretError(f"the course secret in {where} is {len(text)} characters; use at least {MIN_LENGTH}: " + HOW)
    return text.encode("utf-8")


def seed(secret, key):
    """The seed of the hidden inputs for a student (or a group) known by `key`: 32 bits of
    HMAC-SHA256(secret, key)."""
    return int.from_bytes(hmac.new(secret, b"cs349e-seed\0" + key.encode("utf-8"), hashlib.sha256).digest()[:4],
                          "little")


def key_of(people):
    """What a student's or a group's seed is made from: their emails (lowercased, sorted, joined by
    commas), else their ids. Gradescope's submission_metadata.json (users) and the batch's roster
    or export metadata (grader/roster.py) give the same key for the same student when both know the
    email. "" for nobody."""
    keys = {str(p.get("email") or p.get("id") or "").strip().lower() for p in people if isinstance(p, dict)}
    return ",".join(sorted(keys - {""}))


def throwaway():
    """A fresh random secret, for checks and simulations that must not use (or replace) the course's."""
    return secrets.token_urlsafe(32).encode()
