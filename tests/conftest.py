from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Shared test helpers (e.g. store_contract.py, run by both unit and integration suites) live in
# tests/; make them importable regardless of pytest's import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
# Their asserts report the compared values, as they did inside the test modules.
pytest.register_assert_rewrite("rule_forms")

# pytest-xdist hands its workers the terminal's width as COLUMNS (80 without a terminal); the
# CLI tests read tables as a pipe without COLUMNS gets them (trainguard.cli.console), whichever
# process runs them. Before any test module imports the CLI.
os.environ.pop("COLUMNS", None)

ALONE_CHOICES = ("with", "without", "only")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--alone", choices=ALONE_CHOICES, default="with",
        help="tests marked `alone` (they measure speed: CPU, links, step times) need the "
             "machine to themselves: 'without' deselects them (the parallel part of `make "
             "test`), 'only' runs nothing else (its serial part after); default 'with'")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mode = config.getoption("--alone")
    if mode == "with":
        return
    keep = mode == "only"
    selected, deselected = [], []
    for item in items:
        alone = item.get_closest_marker("alone") is not None
        (selected if alone is keep else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
