from __future__ import annotations

import os
import shutil
import sys
import tempfile
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


# What the product leaves in the temporary directory on purpose: a failed `trainguard check`
# keeps its agents' logs (and says where), and an agent killed with SIGKILL cannot remove its
# work directory (its node's next agent does, which a test never starts). After a passing run
# the suite removes those it created; after a failing one it keeps them to read.
_LEFT_BEHIND = ("trainguard-check-", "trainguard-agent-")
_BEFORE = pytest.StashKey[set[Path]]()


def _left_behind() -> set[Path]:
    root = Path(tempfile.gettempdir())
    return {p for prefix in _LEFT_BEHIND for p in root.glob(f"{prefix}*") if p.is_dir()}


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.stash[_BEFORE] = _left_behind()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None or exitstatus != 0:
        return
    for path in _left_behind() - before:
        shutil.rmtree(path, ignore_errors=True)
