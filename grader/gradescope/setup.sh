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

# Python 3.11 or newer (the grader's code and its pinned numpy need it): one already there, else
# python3.11 from apt, else apt's python3 if it is new enough. An image that has none stops HERE,
# with one message naming the base image to choose, never later at the first student's submission.
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null; }
candidate() { apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *\([0-9][^ ]*\).*/\1/p'; }
PY=""
for name in python3.11 python3.12 python3.13 python3; do
    if command -v "$name" >/dev/null && new_enough "$(command -v "$name")"; then PY=$(command -v "$name"); break; fi
done
if [ -z "$PY" ] && [ -n "$(candidate python3.11)" ]; then
    apt-get install -y -q python3.11 python3.11-venv
    PY=$(command -v python3.11)
fi
APT_PY=$(candidate python3)
if [ -z "$PY" ] && [ -n "$APT_PY" ] && dpkg --compare-versions "$APT_PY" ge 3.11~; then
    apt-get install -y -q python3 python3-venv
    PY=$(command -v python3)
fi
if [ -z "$PY" ]; then
    echo "setup.sh: this autograder needs Python 3.11 or newer; this image has none and its apt offers" \
         "python3 ${APT_PY:-(none)} and no python3.11. In Gradescope's autograder settings choose the base" \
         "image Ubuntu 22.04 (the default: python3.11 comes from its apt), then rebuild the autograder." >&2
    exit 1
fi
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$PY" -c 'import ensurepip' 2>/dev/null || apt-get install -y -q "python$VER-venv"   # Debian ships venv apart
apt-get install -y -q util-linux  # unshare, setpriv: namespaces and the privilege drop

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$SRC/requirements.txt"
chmod -R a+rX "$VENV"

# Secrets: only root may read the sources; the grader also hides them from the sandbox with a mount
# namespace, so either protection alone keeps the reference and hidden inputs away from submissions.
chown -R root:root "$SRC"
chmod -R go-rwx "$SRC"
mkdir -p /autograder/results && chmod 700 /autograder/results

# Fail now, with a clear message, rather than at the first submission: provision the sandbox's
# runtime and start a whole sandbox (namespaces, new root, privilege drop) on the reference.
cd "$SRC" && "$VENV/bin/python" -m grader.runtime --check
