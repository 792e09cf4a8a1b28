from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.ckpt import CheckpointDir, corrupt_checkpoint
from trainguard.errors import CheckpointError


def test_corrupt_checkpoint_damages_the_largest_file_in_place(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    ckpts.save_bytes(10, {"model.pt": bytes(range(256)) * 8, "meta.json": b"{}"})
    [info] = ckpts.list()
    before = info.file("model.pt").read_bytes()
    damaged = corrupt_checkpoint(info)
    assert damaged == info.file("model.pt")
    after = damaged.read_bytes()
    assert len(after) == len(before) and after != before
    assert [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b] == list(
        range(992, 1056)
    )
    assert ckpts.validate(info) == "sha256 mismatch for model.pt"
    assert ckpts.latest_valid()[0] is None
    corrupt_checkpoint(str(info.path))  # a path works too; twice restores the original bytes
    assert ckpts.validate(info) is None


def test_tiny_file(tmp_path: Path) -> None:
    saved = CheckpointDir(tmp_path).save_bytes(1, {"a": b"x"})
    assert corrupt_checkpoint(saved.path).read_bytes() == bytes([ord("x") ^ 0xFF])


def test_nothing_to_corrupt(tmp_path: Path) -> None:
    saved = CheckpointDir(tmp_path).save_bytes(1, {"empty.bin": b""})
    with pytest.raises(CheckpointError, match="no non-empty file"):
        corrupt_checkpoint(saved.path)
    with pytest.raises(CheckpointError, match="cannot corrupt checkpoint"):
        corrupt_checkpoint(tmp_path / "missing")
