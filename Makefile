# trainguard developer entry points. `make demo` and `make test` work on a fresh machine:
# they create .venv, install the package with its dev extras, and (for tests) the Debian
# packages the integration tests start (scripts/sysdeps.sh).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install sysdeps demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "trainguard needs Python >= 3.11 (set PYTHON=python3.11)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

install: $(STAMP)

sysdeps:
	bash scripts/sysdeps.sh

# The most complete end-to-end story that exists: classify the bundled logs of a real-shaped
# incident (4 nodes x 8 GPUs, XID 79 on one GPU, NCCL timeouts on the other 31 ranks).
demo: install
	$(BIN)/trainguard logs classify --host-from-path examples/incidents/xid79-allreduce-hang
	@echo
	@echo "JSON for scripting:  $(BIN)/trainguard logs classify --json --host-from-path examples/incidents/xid79-allreduce-hang"
	@echo "What XID 79 means:   $(BIN)/trainguard xid explain 79"

lint: install
	$(BIN)/ruff check src tests benchmarks examples

typecheck: install
	$(BIN)/mypy --strict src

pytest: install sysdeps
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: install
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache bench-data
