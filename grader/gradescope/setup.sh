#!/usr/bin/env bash
# Gradescope runs this once, as root, when the autograder image is built (from /autograder/source).
# It installs a Python the sandbox's unprivileged uids can run (outside /root), and locks the secrets
# (reference solution, hidden suites) to root. No user account is needed: the sandbox runs each
# submission under a dedicated numeric uid (64100 + job) that owns nothing on the machine.
set -euo pipefail
SRC=/autograder/source
VENV=/opt/cs349e-venv

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
PY=$(command -v python3.11 || true)
if [ -z "$PY" ]; then
    apt-get install -y -q python3.11 python3.11-venv || apt-get install -y -q python3 python3-venv
    PY=$(command -v python3.11 || command -v python3)
fi
apt-get install -y -q util-linux  # unshare, setpriv: namespaces and the privilege drop

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$SRC/requirements.txt"
chmod -R a+rX "$VENV"

# Secrets: only root may read the sources; the grader also hides them from the sandbox with a mount
# namespace, so either protection alone keeps the reference and hidden inputs away from submissions.
chown -R root:root "$SRC"
chmod -R go-rwx "$SRC"
mkdir -p /autograder/results && chmod 700 /autograder/results

# Fail now, with a clear message, rather than at the first submission.
cd "$SRC" && "$VENV/bin/python" -m grader.runtime --check
