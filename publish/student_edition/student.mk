# The students' Make targets, written once: the course's Makefile includes this file, and the student edition ships
# it beside its own Makefile (publish/edition.py). The including Makefile defines BIN (the venv's bin/) and install.

# JupyterLab's port: `make lab PORT=8890` when 8888 is taken.
PORT ?= 8888
# Jupyter refuses to run as root unless told to (containers and CI machines often are root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# Which lab (and which exercise in it) reset-lab, exercises and validate act on: LAB=03 or LAB=03_gradient_clipping.
LAB ?=
EXERCISE ?=

.PHONY: lab my-work reset-lab exercises validate

# Your own copies of the labs: each released lab is copied once into my-work/ (git-ignored); an existing copy is never
# written to (trainkit/workspace.py).
my-work: install
	$(BIN)/python -m trainkit.workspace sync

lab: my-work
	@echo "Starting JupyterLab: open the http://127.0.0.1:$(PORT)/lab?token=... URL printed below; your labs are in my-work/."
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --ServerApp.port_retries=0 \
	  --ServerApp.root_dir=$(CURDIR) --LabApp.news_url=None $(ALLOW_ROOT)

reset-lab: install
	@test -n "$(LAB)" || { echo "say which lab: make reset-lab LAB=03_gradient_clipping [EXERCISE=clip_grad_norm]"; exit 2; }
	$(BIN)/python -m trainkit.workspace reset $(LAB) $(EXERCISE)

exercises: install
	@test -n "$(LAB)" || { echo "say which lab: make exercises LAB=03"; exit 2; }
	$(BIN)/python -m trainkit.workspace exercises $(LAB)

# A lab's due date first (labs/<lab>/DUE.md, written by make labs when the course has a term.toml), then nbgrader's
# validate of your copy.
validate: my-work
	@test -n "$(wildcard my-work/$(LAB)*/*.ipynb)" || { echo "no lab in my-work/ matches LAB=$(LAB)"; exit 2; }
	@for f in $(sort $(wildcard labs/$(LAB)*/DUE.md)); do head -n 1 "$$f"; done
	$(BIN)/nbgrader validate $(sort $(wildcard my-work/$(LAB)*/*.ipynb))
