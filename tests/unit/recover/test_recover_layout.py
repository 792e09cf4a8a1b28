"""Architecture checks on `recover/`: backends are asked what they can do (declared
capabilities, typed protocols), never probed by attribute name or told apart by their name; and
no module of the supervisor's grows back into one large class."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "trainguard"
RECOVER = sorted((SRC / "recover").glob("*.py"))
CHOOSERS = [*RECOVER, SRC / "cli" / "run.py", SRC / "agent" / "backend.py"]
_NAME_BRANCH = re.compile(r"""\bname\s*(==|!=)\s*["']""")


def _getattr_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr"}]


@pytest.mark.parametrize("path", CHOOSERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_attribute_probing(path: Path) -> None:
    assert _getattr_calls(path) == [], f"{path.name}: use a Capabilities field or a Protocol"


@pytest.mark.parametrize("path", CHOOSERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_branch_on_a_backend_name(path: Path) -> None:
    hits = [n for n, line in enumerate(path.read_text().splitlines(), 1)
            if _NAME_BRANCH.search(line)]
    assert hits == [], f"{path.name}:{hits}: declare a capability or a registry entry"


@pytest.mark.parametrize("path", RECOVER, ids=lambda p: p.name)
def test_recover_modules_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 400


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('x = getattr(obj, "control", None)\nif backend.name == "local":\n    pass\n')
    assert _getattr_calls(probe) == [1]
    assert [n for n, line in enumerate(probe.read_text().splitlines(), 1)
            if _NAME_BRANCH.search(line)] == [2]
