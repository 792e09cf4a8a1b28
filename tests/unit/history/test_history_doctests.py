"""The examples in trainguard.history's docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["sources", "names", "fields", "extract", "kinds", "times", "mapping", "pairing",
           "overlaps", "read", "window"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"trainguard.history.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
