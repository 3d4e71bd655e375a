# gpucluster: the README's two commands (demo, test) and a few helpers.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv deps unit integration lint bench mutation clean

$(STAMP): pyproject.toml
	@scripts/bootstrap-python.sh "$(PY)" "$(VENV)"
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

## make demo [PORT=8081]: create the environment and run the control plane on the built-in simulated cluster
## (the port also comes from $$GPUCLUSTER_PORT; default 8080)
PORT ?=
demo: $(STAMP)
	$(BIN)/gpucluster up --speed 10 $(if $(PORT),--port $(PORT))

## make test: install everything the tests need (services included) and run the whole suite
test: $(STAMP) deps lint unit integration

deps:
	scripts/test-deps.sh install

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q -n 2 -m "not integration" -p no:cacheprovider

## make integration [K8S=v1.35.4] [INTEGRATION_WORKERS=1]: the integration tests; every Kubernetes test runs once
## per version (default: each version scripts/test-deps.sh builds, v1.37.2 and v1.35.4). By default in two
## pytest-xdist workers (docs/testing.md): all tests of one Kubernetes version in one worker on its own control
## plane, other tests with their module (tests/conftest.py). INTEGRATION_WORKERS=1 (or empty, or 0): one process,
## one test at a time.
K8S ?=
INTEGRATION_WORKERS ?= 2
integration: $(STAMP)
	$(if $(K8S),K8S="$(K8S)") $(BIN)/pytest -q -m integration -p no:cacheprovider$(if \
	  $(filter-out 0 1,$(strip $(INTEGRATION_WORKERS))), -n $(strip $(INTEGRATION_WORKERS)) --dist loadscope \
	  --durations=15)

## make mutation: break the product one curated line at a time (tests/mutation/mutants.yaml) and check that the
## tests named for each mutant fail; on demand, not part of make test. ARGS="--section engine", "-j 2" ...
mutation: $(STAMP)
	$(BIN)/python -m tests.mutation.run $(ARGS)

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts
