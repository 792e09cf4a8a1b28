"""`write_json_atomic`: a whole document or the old one, never half; one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainguard.atomicjson import write_json_atomic
from trainguard.errors import LaunchError


def test_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    write_json_atomic(path, {"attempt": 2, "nodes": ["n1"]})
    assert json.loads(path.read_text()) == {"attempt": 2, "nodes": ["n1"]}
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_missing_directory_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"cannot write .*missing.*state\.json"):
        write_json_atomic(tmp_path / "missing" / "state.json", {})


def test_unserializable_value_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"attempt": 1}')
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(path, {"loss": float("nan")})
    assert path.read_text() == '{"attempt": 1}'
    assert sorted(os.listdir(tmp_path)) == ["state.json"]
