#!/usr/bin/env bash
# Do the hostile submissions have teeth? Runs them against the grader with its isolation turned OFF
# (`--isolate no`), inside a disposable world, and expects run.py to report breaches (a reference stolen
# from disk, forged results, tampered grader files, a deleted canary, markers, the canary port reached).
# A corpus whose attacks all "pass" here would prove nothing about the real, isolated grader.
#
#   sudo unshare --mount --pid --fork --mount-proc --net bash grader/selftest/teeth.sh
#
# The world: private mount, pid and network namespaces; / read-only; fresh tmpfs over /tmp, /var/tmp and
# /dev/shm; the checkout copied to a tmpfs and bound over itself. Nothing the attacks do survives the
# namespace. Root only. Prints run.py's report (non-zero failures are the expected outcome).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "teeth.sh: needs root (run it under unshare as shown above)"; exit 2; }
[ "$$" = 1 ] || [ -n "${TEETH_FORCE:-}" ] || {
  echo "teeth.sh: run it in new namespaces: unshare --mount --pid --fork --mount-proc --net bash $0"; exit 2; }
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
mount --make-rprivate /
mkdir -p /run/sth-world
mount -t tmpfs -o size=3g sth-world /run/sth-world
mkdir /run/sth-world/repo
cp -a "$REPO/." /run/sth-world/repo/
mount --bind /run/sth-world/repo "$REPO"
mount -o remount,bind,ro /
for d in /tmp /var/tmp /dev/shm; do mount -t tmpfs -o size=1g sth-tmp "$d"; done
ip link set lo up 2>/dev/null || true
cd "$REPO"
.venv/bin/python -m grader.selftest.run --only hostile --allow-unisolated --grader-args "--isolate no" "$@" || true
