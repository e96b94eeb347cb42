# gpdlm: two set-up commands. `make demo` and `make test` create .venv and install the project.
# On a CPU-only machine the CPU build of torch is installed first (TORCH_SPEC), so pip never pulls a
# multi-GB CUDA build; on a GPU machine use e.g. `make TORCH_SPEC=torch demo`.
#
# PYTHON: the interpreter that creates .venv. By default the first of python3.13, python3.12,
# python3.11, python3 on PATH whose version is 3.11-3.13 (gpdlm's supported versions);
# `make PYTHON=/path/to/python3.12 demo` picks one yourself.
SUPPORTED_PYTHONS := python3.13 python3.12 python3.11 python3
PYTHON_OK = $(if $(strip $(1)),$(shell $(1) -c 'import sys; print(int((3, 11) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null))
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach p,$(SUPPORTED_PYTHONS),$(if $(filter 1,$(call PYTHON_OK,$(p))),$(p))))
endif
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpdlm-installed
TEST_STAMP := $(VENV)/.gpdlm-test-installed

.PHONY: install demo test test-fast lint format bench docs check-python clean

# one line, before anything is created, when no suitable Python is found (or PYTHON names an unsuitable one)
check-python:
	@if [ -z "$(PYTHON)" ]; then \
	  echo "make: error: no Python 3.11-3.13 found on PATH (tried $(SUPPORTED_PYTHONS)); install one or run make PYTHON=/path/to/python3.12 ..." >&2; exit 2; fi
	@if [ "$(call PYTHON_OK,$(PYTHON))" != "1" ]; then \
	  echo "make: error: PYTHON=$(PYTHON) is not a Python 3.11-3.13 (gpdlm supports 3.11, 3.12 and 3.13)" >&2; exit 2; fi

# gpdlm and its dev tools (pytest): what `make demo` needs, no Ray
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(MAKE) --no-print-directory check-python PYTHON="$(PYTHON)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

# what the test suite needs on top: hydra/launcher=ray for its Ray-launcher test -- ray itself plus the
# launcher without its AWS extras (hydra-ray-launcher declares ray[default], boto3 and cloudpickle<3, which
# the local launcher does not need); `pip install 'gpdlm[ray]'` installs it with those declared dependencies
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q "ray>=2.9,<3"
	$(BIN)/python -m pip install -q --no-deps "hydra-ray-launcher>=1.2.2"
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpdlm train

# the whole suite (its budget: 12 minutes on 2 cores; CONTRIBUTING.md#tests). --dist loadgroup: tests/conftest.py
# keeps a module that shares a module-scoped fixture on one worker and starts the modules with slow tests first
test: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup $(PYTEST_ARGS)

# the fast lane: everything but the tests marked slow (subprocesses, smoke presets, runs over ~3 s)
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow" $(PYTEST_ARGS)

# ruff (lint + format check) and mypy on the library; .ci/run runs it before the tests
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# apply the formatter and the safe lint fixes
format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# docs/configuration.md from the composed configs (tests/test_docs.py checks it is up to date)
docs: $(STAMP)
	$(BIN)/python tools/config_docs.py

clean:
	rm -rf $(VENV) outputs/* mlflow.db mlartifacts .pytest_cache
