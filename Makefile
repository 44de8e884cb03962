# Two commands a person needs: `make lab` (start the course) and `make test` (check everything).
# The virtual environment is built once and rebuilt only when pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# nbgrader runs helper executables (alembic) by name: the venv must be first on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Offline by default: wandb never tries the network unless a student opts in.
export WANDB_MODE ?= offline
# Parallel workers for pytest-xdist and for make grade: one per core (CI machines have 2).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: hub lab test lint regrade release-regrade canvas lms-csv items similarity test-notebooks test-portability test-gpu gpu-wheels labs grade install normalize clean-grading help my-work reset-lab exercises validate student-edition site check-pythons

help:
	@echo "For students (work in my-work/, never in labs/):"
	@echo "make lab    copy any new lab into my-work/ (your copies are never overwritten), start JupyterLab (PORT=8888)"
	@echo "make validate LAB=03   run your copy of lab 03 and its visible tests (nbgrader validate); without LAB: every lab"
	@echo "make reset-lab LAB=03 [EXERCISE=name]  start lab 03 (or one exercise of it) afresh; the old copy goes to my-work/backups/"
	@echo "make exercises LAB=03  list the exercise names of lab 03 (for EXERCISE=)"
	@echo "make my-work  copy any new lab into my-work/ without starting JupyterLab (make lab does it too)"
	@echo "make install   build .venv from the pins in pyproject.toml (the other targets do it when needed)"
	@echo "For instructors and maintainers (students never need these; they act on the whole course):"
	@echo "make test   run the whole test suite (lint, notebooks, autograder proofs, packaging)"
	@echo "make lint   ruff on the Python sources and notebooks (part of make test)"
	@echo "make test-portability  run every notebook under other CPU kernel paths (KERNEL_PATHS=\"default avx avx2\"), as other CPUs compute"
	@echo "make test-notebooks KERNEL_PATH=default  run every notebook once, on one kernel path (empty: this CPU's own)"
	@echo "make labs   regenerate labs/ from solutions/; stops, overwriting nothing, if a file in labs/ was edited by hand (FORCE=1 overwrites)"
	@echo "make student-edition  build the student edition (no solutions, hidden tests or grading tools) into build/student-edition/ (EDITION=dir, ARCHIVE=1 adds a .tar.gz)"
	@echo "make grade  autograde submitted/<student>/<assignment>/ (JOBS at once, sandboxed without root), write feedback/ and grades/grades.csv"
	@echo "Running a term (docs/term.md; due dates, late policy and extensions: term.toml, from term.example.toml):"
	@echo "make regrade LAB=05 REASON='...'  regrade a lab after its tests changed: keeps manual grades, writes a diff, releases nothing"
	@echo "make release-regrade LAB=05  release the feedback the lab's latest regrade changed"
	@echo "make canvas ROSTER=roster.csv ASSIGNMENTS=assignments.csv  the grades as a Canvas gradebook import (ALLOW_MISSING=1)"
	@echo "make lms-csv  the grades as a plain CSV, for any other LMS"
	@echo "make items  item analysis of the graded labs: grades/items/index.html"
	@echo "make similarity LAB=02  pairs of submissions whose answers are unusually alike: evidence to read, never a grade"
	@echo "make hub    (as root) JupyterHub for a class on this Linux server: sudo make hub STUDENTS=\"ann bob\" INSTRUCTORS=\"cy\" (PAM; to try it: AUTH=shared asks for a students' and an instructors' password, or HUB_PASSWORD_FILE=<root-only file>; Submit: KEEP_SUBMISSIONS=5 MAX_SUBMISSION_MB=20)"
	@echo "make test-gpu  on a CUDA GPU, every topic in one timed run (about 8 minutes; notebooks at GPU sizes, tests/test_gpu.py, grading, the capstone, the speed tables): results in build/gpu-check/ (OUT=dir); without a GPU it says so and does nothing"
	@echo "make gpu-wheels  the wheelhouse .whl/ that benchmarks/gpu_check.sh installs on a GPU machine with torch but no package index"
	@echo "make normalize strip outputs and fix metadata of lessons/ and solutions/ notebooks (before committing)"
	@echo "make site  execute every lesson (JOBS at once) and build their readable HTML edition in build/site/ (FORCE=1 re-executes all)"
	@echo "make check-pythons  check with pip's resolver that every pin has binary wheels for each supported Python (needs the package index; minutes)"
	@echo "make clean-grading  remove the gradebook and all grading output"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
# setuptools prints warnings of its own for an editable install (they read like errors and are not): kept in a log,
# shown only if the install fails.
	$(BIN)/python -m pip install --quiet -e . >$(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	for ext in formgrader assignment_list course_list validate_assignment; do \
	  $(BIN)/jupyter server extension enable --sys-prefix nbgrader.server_extensions.$$ext >/dev/null 2>&1; done
	$(BIN)/jupyter labextension enable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1
# Build matplotlib's font cache now: on a fresh machine the first import writes "Matplotlib is building
# the font cache" to stderr, which would otherwise land in the first notebook cell that plots.
	$(BIN)/python -c "import matplotlib.pyplot"
	touch $(STAMP)

install: $(STAMP)
# nbgrader's exchange folder (nbgrader_config.py): world-writable with the sticky bit, as nbgrader requires.
# Under make hub it is a link to the hub's exchange (root's, already 1777): left as it is.
	@test -L .nbgrader_exchange || { mkdir -p .nbgrader_exchange && chmod 1777 .nbgrader_exchange; }

# The students' targets (my-work, lab, reset-lab, exercises, validate), shared with the student edition.
include publish/student_edition/student.mk

# The solution notebooks run under nbgrader itself there (tests/test_autograder.py: full marks outside one planted bug,
# and no cell it cannot reach fails), so nbval runs the lessons; `make test-notebooks` runs both (CI: on another
# kernel path), every cell of every solution included.
test: install lint
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=600 tests lessons

# The Python sources and the notebooks under ruff (pyproject.toml: [tool.ruff]); part of make test.
lint: install
	$(BIN)/ruff check --quiet .

# The lesson and solution notebooks alone, on the kernel path KERNEL_PATH (one of KERNEL_PATHS below; empty: this
# machine's own). A chaotic training run's digits differ from one CPU to another, so no notebook may assert them.
test-notebooks: install
	@echo "kernel path: $(or $(KERNEL_PATH),native) ($(or $(KERNEL_PATH_$(KERNEL_PATH)),no overrides)); this CPU's own: \
	$$($(BIN)/python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')"
	$(KERNEL_PATH_$(KERNEL_PATH)) $(BIN)/python -m pytest -p no:cacheprovider -n $(JOBS) --dist loadgroup --nbval-lax \
	  --nbval-current-env --nbval-cell-timeout=600 lessons solutions

# Other CPUs, simulated on this one: ATen's vector kernels, MKL's BLAS and oneDNN each capped at an older instruction
# set (on a CPU with AVX-512 every one of them differs from the native path; on an AVX2 CPU, avx2 is the native one).
KERNEL_PATH_default := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
KERNEL_PATH_avx     := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=AVX ONEDNN_MAX_CPU_ISA=AVX
KERNEL_PATH_avx2    := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
KERNEL_PATHS ?= default avx avx2

# Every notebook on every kernel path of KERNEL_PATHS (run it before committing a notebook; CI runs `default`).
test-portability: install
	@for path in $(KERNEL_PATHS); do $(MAKE) --no-print-directory test-notebooks KERNEL_PATH=$$path || exit 1; done

# The GPU check of every topic in one prepared run that fits a short GPU lease (benchmarks/gpu_check.py: every lesson
# and solution notebook under nbval at its GPU sizes, tests/test_gpu.py, make grade of each lab's reference and blank
# release, the capstone's gpu preset with tokens/s and MFU, the mixed-precision and throughput tables), each part
# with its own time limit; a markdown table in $(OUT). Grading runs on the CPU by design (its sandbox hides the GPU), so
# there the check is that the GPU machine grades as a CPU does. Without a GPU it says so and exits 0. On a GPU machine with
# only python3 and torch (no .venv, no package index): carry .whl/ (make gpu-wheels) and run benchmarks/gpu_check.sh.
OUT ?= build/gpu-check
test-gpu: install
	$(BIN)/python benchmarks/gpu_check.py --out $(OUT)

# The course's packages other than torch, as wheels for the GPU machine's python3 (3.12), in .whl/ (git-ignored).
gpu-wheels: install
	$(BIN)/python benchmarks/gpu_wheels.py --out .whl

# Instructor: regenerate labs/ (nbgrader generate_assignment), refusing to overwrite hand edits (publish/release.py).
labs: install
	$(BIN)/python -m publish.release $(if $(FORCE),--force)

# Instructor: the student edition (publish/edition.py, templates in publish/student_edition/), ready to publish as its own repository.
EDITION ?= build/student-edition
student-edition: install
	$(BIN)/python -m publish.edition --out $(EDITION) $(if $(ARCHIVE),--archive)

# Sandboxed (autograder/sandbox.py: bubblewrap, no root needed); where no sandbox can be made it grades nothing and
# says why. UNSANDBOXED=1 grades anyway, each submission's code with your rights: never for a class.
grade: install
	$(BIN)/python -m autograder.grade --jobs $(JOBS) $(if $(UNSANDBOXED),--no-sandbox)

# Instructor, running a term (docs/term.md): the course file term.toml (format: term.example.toml) holds due dates, the
# late policy and extensions, which make grade and make labs apply. The rest reads the graded gradebook.
# Regrade one lab with its tests as they are now: keeps grades given by hand, writes grades/regrade-<lab>-<time>/ and
# a note in changed feedback; releases nothing until make release-regrade.
regrade: install
	@test -n "$(LAB)" -a -n "$(REASON)" || { echo "say which lab and why: make regrade LAB=05 REASON='...'"; exit 2; }
	$(BIN)/python -m autograder.term.regrade $(LAB) --reason "$(REASON)" --jobs $(JOBS) $(if $(UNSANDBOXED),--no-sandbox)

release-regrade: install
	@test -n "$(LAB)" || { echo "say which lab: make release-regrade LAB=05"; exit 2; }
	$(BIN)/python -m autograder.term.regrade $(LAB) --release $(DIR)

# The grades as a Canvas gradebook import (ROSTER=roster.csv, ASSIGNMENTS=assignments.csv, ALLOW_MISSING=1), or a
# plain CSV for any other LMS.
canvas: install
	@test -n "$(ROSTER)" || { echo "say where the roster is: make canvas ROSTER=roster.csv ASSIGNMENTS=assignments.csv"; exit 2; }
	$(BIN)/python -m autograder.term.canvas --roster $(ROSTER) $(if $(ASSIGNMENTS),--assignments $(ASSIGNMENTS)) $(if $(ALLOW_MISSING),--allow-missing)

lms-csv: install
	$(BIN)/python -m autograder.term.canvas --plain

# Item analysis of the graded labs (grades/items/index.html), and the pairs of one lab's submissions whose answers are
# unusually alike (grades/similarity/<lab>/): evidence for a person to read, never a grade.
items: install
	$(BIN)/python -m autograder.term.items

similarity: install
	@test -n "$(LAB)" || { echo "say which lab: make similarity LAB=02"; exit 2; }
	$(BIN)/python -m autograder.term.similarity $(LAB) $(if $(OUT),--out $(OUT))

# Instructor, on a Linux server, as root: JupyterHub for a class (publish/hub.py; docs/hub.md, "Run the course for a
# class"). The checkout's .venv is built as the account that owns the checkout (the grader), never as root.
# AUTH=shared's passwords never go on a command line (every account's `ps` shows it): it asks on the terminal, or
# reads HUB_PASSWORD_FILE, a file only root can read (lines `students = ...` and `instructors = ...`).
HUB_DIR ?= /srv/training-infra
BIND_URL ?= http://127.0.0.1:8000
AUTH ?= pam
OWNER := $(shell stat -c %U . 2>/dev/null)
hub:
	@test "$$(id -u)" = 0 || { echo "make hub: run it as root (sudo make hub STUDENTS=... INSTRUCTORS=...)"; exit 2; }
	@test "$(OWNER)" != root || { echo "make hub: this checkout belongs to root: clone the course as the grading account"; exit 2; }
	runuser -u $(OWNER) -- $(MAKE) --no-print-directory install PYTHON=$(PYTHON)
	$(BIN)/python -m publish.hub --hub-dir $(HUB_DIR) --students "$(STUDENTS)" \
	  --instructors "$(INSTRUCTORS)" --auth $(AUTH) --bind-url $(BIND_URL) --python $(PYTHON) \
	  $(if $(HUB_PASSWORD_FILE),--password-file $(HUB_PASSWORD_FILE)) \
	  $(if $(KEEP_SUBMISSIONS),--keep-submissions $(KEEP_SUBMISSIONS)) \
	  $(if $(MAX_SUBMISSION_MB),--max-submission-mb $(MAX_SUBMISSION_MB))

normalize: install
	$(BIN)/python -m autograder.notebooks normalize lessons/*.ipynb solutions/*/*.ipynb

# A readable edition of the lessons: each lesson executed afresh, as static HTML with a contents page.
site: install
	$(BIN)/python -m publish.lesson_site --out build/site --jobs $(JOBS) $(if $(FORCE),--force)
	@echo "Open build/site/index.html (self-contained: no network needed, formulas are MathML)."

# Every pin installs from binary wheels on each Python that pyproject.toml's requires-python allows.
check-pythons: install
	TRAINKIT_CHECK_PYTHONS=1 $(BIN)/python -m pytest -p no:cacheprovider -rs tests/test_python_versions.py

clean-grading:
	rm -rf gradebook.db .grading.lock autograded feedback grades .nbgrader_release
