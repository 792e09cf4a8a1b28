"""Every public name each package exports in ``__all__`` imports (httpx's test_exported_members)."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ["trainguard", "trainguard.evidence", "trainguard.store", "trainguard.cli",
            "trainguard.telemetry", "trainguard.detect", "trainguard.simulate", "trainguard.ckpt",
            "trainguard.nfs", "trainguard.trace", "trainguard.watch", "trainguard.nodehealth",
            "trainguard.fleet", "trainguard.planning", "trainguard.history"]


def _exports() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in PACKAGES:
        module = importlib.import_module(name)
        out.extend((name, member) for member in module.__all__)
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_package_declares_all(package: str) -> None:
    exported = importlib.import_module(package).__all__
    assert exported, f"{package}.__all__ is empty"
    assert len(set(exported)) == len(exported), f"{package}.__all__ has duplicates"


@pytest.mark.parametrize(("package", "member"), _exports(), ids=str)
def test_exported_member_imports(package: str, member: str) -> None:
    module = importlib.import_module(package)
    assert hasattr(module, member), f"{package}.__all__ names {member!r}, which is not defined"
