"""trainguard.recover.slurm exports what its ``__all__`` names (as tests/unit/test_exports.py)."""

from __future__ import annotations

import importlib

import pytest

MODULES = ["trainguard.recover.slurm", "trainguard.recover.slurm.hostlist",
           "trainguard.recover.slurm.safety", "trainguard.recover.slurm.commands",
           "trainguard.recover.slurm.history", "trainguard.cli.slurm"]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
    missing = [member for member in module.__all__ if not hasattr(module, member)]
    assert missing == []
