# trainguard developer entry points. `make demo` and `make test` work on a fresh machine:
# they create .venv, install the package with its dev and docs extras, and (for tests) the
# Debian packages the integration tests start (scripts/sysdeps.sh).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install sysdeps demo test lint typecheck docs pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "trainguard needs Python >= 3.11 (set PYTHON=python3.11)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,docs]'
	@touch $@

install: $(STAMP)

sysdeps:
	bash scripts/sysdeps.sh

# The main job on embedded defaults: simulate a 16-node x 8-GPU cluster for 2 days (DCGM and
# node-exporter telemetry, kernel logs, ground truth), then backtest the failure detector on it
# against static DCGM-style rules and PyOD's ECOD, and print where and why it alerted. Then
# supervise the example GPT through a killed rank and the detector's alert on a node, then
# write the report (ETTR, badput, retry chains, exclusions) as terminal summary and HTML.
DEMO_DIR ?= demo-data/cluster
DEMO_RUN ?= demo-data/run
demo: install
	mkdir -p $(DEMO_DIR)  # simulate creates --out itself but no missing directory above it
	$(BIN)/trainguard simulate --nodes 16 --gpus-per-node 8 --days 2 --seed 8 \
		--failures-per-day 3 --gzip --overwrite --out $(DEMO_DIR)
	$(BIN)/trainguard backtest $(DEMO_DIR) --baseline static --baseline ecod \
		--alerts-out $(DEMO_DIR)/alerts.jsonl
	@echo
	@echo "== Recovery: a 3-node GPT job (real PyTorch, gloo); a rank is killed, then the detector's"
	@echo "== alert on node08 (ECC SBE rising, before its XID in the simulation above) moves the job to a spare =="
	rm -rf $(DEMO_RUN)
	$(BIN)/trainguard run --run-dir $(DEMO_RUN) --db $(DEMO_RUN)/trainguard.db \
		--nodes node07,node08,node09 --spares node10 --nproc-per-node 1 \
		--alerts $(DEMO_RUN)/alerts-live.jsonl --alerts-replay $(DEMO_DIR)/alerts.jsonl \
		--stop-on-predictive --warm \
		--inject kill:rank=1,step=150 --inject alert:node=node08,step=300,attempt=1 \
		-- $(BIN)/python examples/train_gpt.py --steps 400 --ckpt-every 100 --log-every 50 \
		--ckpt-dir $(DEMO_RUN)/ckpt --loss-log $(DEMO_RUN)/loss.txt
	@echo
	$(BIN)/trainguard report --db $(DEMO_RUN)/trainguard.db --html $(DEMO_RUN)/report.html
	@echo
	@echo "Alerts of every detector (JSON lines): $(DEMO_DIR)/alerts.jsonl"
	@echo "Supervised run: $(DEMO_RUN)/summary.json (attempts, failures, decisions, exclusions)"
	@echo "Report (open in a browser): $(DEMO_RUN)/report.html"
	@echo "Detect only, as JSON:   $(BIN)/trainguard detect $(DEMO_DIR) --json"
	@echo "Classify failure logs:  $(BIN)/trainguard logs classify --host-from-path examples/incidents/xid79-allreduce-hang"

lint: install
	$(BIN)/ruff check src tests benchmarks examples scripts

typecheck: install
	$(BIN)/mypy --strict src

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or
# anchor and on a page missing from the navigation.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# The suite in two parts (scripts/pytest_parts.sh): on PYTEST_WORKERS processes, then the tests
# marked `alone` (they measure speed) with the machine to themselves.
# PYTEST_ARGS='-m "not multihost"' skips the namespaced multi-host runs (CI runs them).
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 4
pytest: install sysdeps
	bash scripts/pytest_parts.sh $(BIN)/pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

test: lint typecheck docs pytest

bench: install
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache bench-data demo-data site
