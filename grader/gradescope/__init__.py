"""Packaging for Gradescope: build/autograder.zip with setup.sh, run_autograder and the sources."""
