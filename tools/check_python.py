"""Can this Python build the lab's .venv? Run by the Makefile before the first `make` creates it.

Prints nothing when it can, else ONE line naming the Python found and what to install; exits 0
either way, so a non-zero exit means the Python could not even run this file (the Makefile then
says so). Written to run on any Python, 2.7 included: no f-strings, no annotations.
"""
import sys

OLDEST = (3, 9)
INSTALL = ("install Python 3.9 or newer (python.org; macOS: brew install python@3.12; "
           "Ubuntu: sudo apt install python3.9-venv) and run make PYTHON=python3.X")


def problem():
    found = "Python %s (%s)" % (sys.version.split()[0], sys.executable or "?")
    if tuple(sys.version_info[:2]) < OLDEST:
        return "%s is too old for this lab: %s" % (found, INSTALL)
    try:
        import ensurepip  # noqa: F401  (Debian and Ubuntu ship it only in the pythonX.Y-venv package)
        import venv  # noqa: F401
    except ImportError:
        return "%s cannot create a .venv: sudo apt install python%d.%d-venv, or %s" % (
            found, sys.version_info[0], sys.version_info[1], INSTALL)
    return ""


if __name__ == "__main__":
    message = problem()
    if message:
        print(message)
