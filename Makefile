# gpdlm: two set-up commands. `make demo` and `make test` create .venv and install the project.
# On a CPU-only machine the CPU build of torch is installed first (TORCH_SPEC), so pip never pulls a
# multi-GB CUDA build; on a GPU machine use e.g. `make TORCH_SPEC=torch demo`.
PYTHON ?= python3.11
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpdlm-installed

.PHONY: install demo test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	# hydra/launcher=ray for the tests: ray itself plus the launcher without its AWS extras
	# (hydra-ray-launcher declares ray[default], boto3 and cloudpickle<3, which the local launcher
	# does not need); `pip install 'gpdlm[ray]'` installs it with those declared dependencies
	$(BIN)/python -m pip install -q "ray>=2.9,<3"
	$(BIN)/python -m pip install -q --no-deps "hydra-ray-launcher>=1.2.2"
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpdlm train

# the whole suite (~7 minutes on 2 cores)
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 $(PYTEST_ARGS)

# the fast lane: everything but the tests marked slow (subprocesses, smoke presets, runs over ~3 s)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) outputs/* mlflow.db mlartifacts .pytest_cache
