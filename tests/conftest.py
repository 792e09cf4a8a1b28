from __future__ import annotations

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
