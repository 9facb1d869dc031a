# CS349E lecture 7: PagedAttention assignment. Every target bootstraps .venv from requirements.txt.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
IMPL   ?= starter
PART   ?=
SUBMISSION ?= solution/paged_kv.py
# The parts, from tests/registry.py (evaluated only where used: make help).
PART_IDS = $(shell $(PYTHON) -c "import sys; sys.path.insert(0, 'tests'); import registry; print('|'.join(p.id for p in registry.PARTS))")

.PHONY: help test demo submit handout grade batch regrade similarity browser-check autograder gradescope-sim check selftest bench clean

help:
	@echo "make check                 all of the project's own tests (what CI runs)"
	@echo "make test [IMPL=dir] [PART=$(PART_IDS)]"
	@echo "make demo [IMPL=dir] [LANG=zh]  the lecture's four demos and the bonus parts' demos; LANG=zh... in Chinese"
	@echo "make submit [IMPL=dir]     build/submission.zip from starter/paged_kv.py (another folder F: build/submission-F.zip)"
	@echo "make handout               build/handout.zip for students"
	@echo "make grade [SUBMISSION=f]  grade one submission: a file, a folder or a zip (default: the reference)"
	@echo "make batch DIR=d [ROSTER=csv] [SECRET=path] [JOBS=2] [SEED=n]  grade a class folder into build/gradebook.csv,"
	@echo "                           feedback files and build/gradebook.html (rerun to resume); SEED: one seed for all"
	@echo "make regrade DIR=d NAME=n [ROSTER=csv] [SECRET=path] [SEED=n]  grade submission n again, exactly as the batch did"
	@echo "make similarity DIR=d [OUT=build/similarity.html] [THRESHOLD=0.6] [TOP=10]  similar files in clusters, side by side"
	@echo "make browser-check [REPORT=build/gradebook.html]  open the class report in headless chromium"
	@echo "make autograder [FEEDBACK=full|brief|points] [SECRET=path]  build/autograder.zip for Gradescope (staff only)"
	@echo "make gradescope-sim [SUITES=\"bookworm bullseye\"]  as root: the autograder in fresh Debian roots"
	@echo "make selftest [JOBS=2]     grade the mutants, correct variants and hostile submissions"
	@echo "make bench                 the benchmarks reported in the issues"
	@echo "make clean                 remove build/ and the caches"

$(VENV)/.ready: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

# ---- the students' workflow (tools/labtool.py: the same code as the handout's Makefile)
test: $(VENV)/.ready
	$(PY) tools/labtool.py test --impl $(IMPL) --part "$(PART)"

demo: $(VENV)/.ready
	$(PY) lab/demo.py --impl $(IMPL) --lang "$(LANG)"

submit: $(VENV)/.ready
	$(PY) tools/labtool.py submit --impl $(IMPL)

handout: $(VENV)/.ready
	$(PY) tools/build_handout.py --out build/handout.zip

# ---- grading (staff)
grade: $(VENV)/.ready
	$(PY) -m grader $(SUBMISSION) --results build/results.json

JOBS ?= 2
# The course secret (grader/coursesecret.py): SECRET=path, else $$CS349E_COURSE_SECRET. ROSTER: the class's roster CSV.
SEED_ARG = $(if $(SEED),--seed $(SEED)) $(if $(SECRET),--secret-file $(SECRET)) $(if $(ROSTER),--roster $(ROSTER))
NEED_DIR = @test -n "$(DIR)" || { echo "make $@: give the class folder, e.g. make $@ DIR=submissions"; exit 2; }
batch: $(VENV)/.ready
	$(NEED_DIR)
	$(PY) -m grader batch $(DIR) --jobs $(JOBS) --csv build/gradebook.csv $(SEED_ARG)

regrade: $(VENV)/.ready
	$(NEED_DIR)
	@test -n "$(NAME)" || { echo "make regrade: give the submission's name in DIR (or its student's id), e.g. make regrade DIR=$(DIR) NAME=alice"; exit 2; }
	$(PY) -m grader batch $(DIR) --jobs $(JOBS) --csv build/gradebook.csv $(SEED_ARG) --regrade "$(NAME)"

# Staff tooling, never the grader's or the students' runtime: copydetect in its own venv.
STAFF_VENV := build/staff-venv
$(STAFF_VENV)/.ready:
	$(PYTHON) -m venv $(STAFF_VENV)
	$(STAFF_VENV)/bin/pip install --quiet --disable-pip-version-check copydetect==0.5.0 || { \
	  echo "make similarity: could not install copydetect into $(STAFF_VENV) (pip needs PyPI or a mirror)"; exit 2; }
	touch $@

OUT ?= build/similarity.html
similarity:
	$(NEED_DIR)
	@$(MAKE) --no-print-directory $(STAFF_VENV)/.ready
	$(STAFF_VENV)/bin/python -m grader.similarity $(DIR) --out $(OUT) $(if $(THRESHOLD),--threshold $(THRESHOLD)) \
	  $(if $(TOP),--top $(TOP))

REPORT ?= build/gradebook.html
browser-check:
	$(PYTHON) tools/browser_check.py $(REPORT) --screenshot $(basename $(REPORT)).png

FEEDBACK ?= full
autograder: $(VENV)/.ready
	$(PY) -m grader.gradescope.build build/autograder.zip --feedback $(FEEDBACK) $(if $(SECRET),--secret-file $(SECRET))

# Fresh Debian roots (debootstrap minbase, cached in /var/cache/cs349e-gsim/): setup.sh, then run_autograder on the
# reference, the starter, a syntax error and a hostile submission; see grader/gradescope/sim.py. Its own zip, with a
# throwaway secret: it never replaces the course's build/autograder.zip.
SUITES ?= bookworm bullseye
gradescope-sim: $(VENV)/.ready
	$(PY) -m grader.gradescope.build build/gradescope-sim/autograder.zip --throwaway-secret
	$(PY) -m grader.gradescope.sim $(foreach s,$(SUITES),--suite $(s)) --zip build/gradescope-sim/autograder.zip

selftest: $(VENV)/.ready
	$(PY) -m grader.selftest.run --jobs $(JOBS)

bench: $(VENV)/.ready
	$(PY) bench/run.py

# The selftest runs in the background meanwhile (checks/conftest.py); no pyc may land in the folders it watches:
# every process compiles into build/pycache instead (once: a cold grading would otherwise compile the grader
# again, a third of a second of CPU each). One BLAS thread per process: the products are small, and the
# checks run several processes at once.
check: $(VENV)/.ready
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/build/pycache OPENBLAS_NUM_THREADS=1 \
	  $(PY) -m pytest checks -q

clean:
	rm -rf build .pytest_cache
