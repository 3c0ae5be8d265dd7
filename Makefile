# The README's two commands, on a machine with Python 3.10 or later and nothing else:
#
#   make train    creates the virtual environment if it is missing, installs torch and this package into it, then runs
#                 the main job (python scripts/train.py; ARGS="--recipe multi30k-en-de" passes arguments on)
#   make test     the same set-up, then the test suite (python -m pytest; PYTEST_ARGS="tests/test_readme.py -x" picks
#                 tests), what CI runs through .ci/run
#
# The environment is $(VENV) (.venv in the checkout unless VENV=... names another). torch is installed first and on its
# own, because a plain `torch` requirement pulls a multi-GB CUDA build: TORCH is the requirement, by default the CPU
# build this project is tested with (TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128", or any
# build that suits the machine). The installation runs again only when pyproject.toml changes (the stamp file
# $(VENV)/.installed is older than it), so that each later `make train` or `make test` starts at once.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
ARGS ?=
PYTEST_ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The commands run as in the activated environment: its console scripts (ruff, accelerate, vaswani-*) come first on
# PATH, since the tests start some of them by name.
IN_VENV := PATH="$(abspath $(BIN)):$$PATH" VIRTUAL_ENV="$(abspath $(VENV))"

.PHONY: train test install

train: $(STAMP)
	$(IN_VENV) $(BIN)/python scripts/train.py $(ARGS)

test: $(STAMP)
	$(IN_VENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

install: $(STAMP)

# The environment itself, once: an existing one (its python) is kept as it is.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch, then the package with its dev extra (editable: the checkout's code is what runs), again whenever
# pyproject.toml is newer than the stamp. The environment is an order-only prerequisite, so that its age alone never
# reinstalls.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@
