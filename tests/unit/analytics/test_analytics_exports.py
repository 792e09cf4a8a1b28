"""Every name trainguard.analytics exports imports (as tests/unit/test_exports.py does)."""

from __future__ import annotations

import importlib

import pytest

import trainguard.analytics as analytics

MODULES = ["runs", "goodput", "chains", "failures", "concentration", "leadtime",
           "checkpoint_io", "model", "report", "exposure"]


@pytest.mark.parametrize("member", analytics.__all__)
def test_exported_member(member: str) -> None:
    assert hasattr(analytics, member)


@pytest.mark.parametrize("module", MODULES)
def test_module_all(module: str) -> None:
    mod = importlib.import_module(f"trainguard.analytics.{module}")
    assert mod.__all__ and len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}"
