"""Fencing by attempt epoch: a checkpoint of an older attempt is refused once a newer attempt
uses the directory, and never becomes the latest (issue 26, "Fencing")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainguard.ckpt import CheckpointDir
from trainguard.ckpt.epoch import (
    EPOCH_DIR,
    StaleEpochError,
    check_epoch,
    raise_epoch,
    read_epoch,
)
from trainguard.errors import CheckpointError


def test_the_epoch_only_grows(tmp_path: Path) -> None:
    assert read_epoch(tmp_path) is None
    assert raise_epoch(tmp_path, 2) == 2
    assert raise_epoch(tmp_path, 1) == 2  # an older attempt cannot lower it
    assert read_epoch(tmp_path) == 2
    assert raise_epoch(tmp_path, 5) == 5
    assert raise_epoch(tmp_path, 3) == 5
    assert read_epoch(tmp_path) == 5
    for attempt in range(6, 20):
        raise_epoch(tmp_path, attempt)
    assert read_epoch(tmp_path) == 19
    assert len(list((tmp_path / EPOCH_DIR).iterdir())) <= 4  # old markers are cleaned up


def test_check_epoch(tmp_path: Path) -> None:
    check_epoch(tmp_path, 0, "save")  # nothing recorded: anything goes
    raise_epoch(tmp_path, 3)
    check_epoch(tmp_path, 3, "save")
    check_epoch(tmp_path, 4, "save")
    check_epoch(tmp_path, None, "save")  # unsupervised: no fencing
    with pytest.raises(StaleEpochError, match=r"attempt 2.*attempt 3"):
        check_epoch(tmp_path, 2, "save")


def test_a_stale_attempt_commit_is_refused_and_never_latest(tmp_path: Path) -> None:
    old = CheckpointDir(tmp_path, attempt=0)
    old.save_bytes(10, {"model.bin": b"attempt 0 step 10"})
    new = CheckpointDir(tmp_path, attempt=1)
    new.fence("start")  # the new attempt's ranks open the directory
    with pytest.raises(StaleEpochError, match="refused"):
        old.save_bytes(20, {"model.bin": b"attempt 0 step 20"})
    info, _ = new.latest_valid()
    assert info is not None and info.step == 10
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    saved = new.save_bytes(20, {"model.bin": b"attempt 1 step 20"})
    assert saved.step == 20
    info, _ = new.latest_valid()
    assert info is not None and info.file("model.bin").read_bytes() == b"attempt 1 step 20"


def test_a_commit_staged_before_the_fence_is_refused(tmp_path: Path) -> None:
    """Staged (files written) under attempt 0, the epoch raised, then the commit: refused."""
    old = CheckpointDir(tmp_path, attempt=0)
    old.save_bytes(10, {"model.bin": b"ten"})
    staged = old.stage(30)
    (staged.tmp / "model.bin").write_bytes(b"thirty")
    raise_epoch(tmp_path, 1)
    with pytest.raises(CheckpointError, match="attempt 1 has started"):
        old.commit(staged, {})
    assert [i.step for i in old.list()] == [10]
    assert not staged.tmp.exists()


def test_a_fence_between_check_and_rename_takes_the_commit_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the epoch is raised after the commit's check, before its rename. The renamed
    checkpoint is taken out again and a replaced copy is restored."""
    old = CheckpointDir(tmp_path, attempt=0)
    old.save_bytes(10, {"model.bin": b"original ten"})
    staged = old.stage(10)
    (staged.tmp / "model.bin").write_bytes(b"stale ten")
    real_rename = os.rename

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(src) == staged.tmp:
            raise_epoch(tmp_path, 1)  # a new attempt starts right now
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(StaleEpochError):
        old.commit(staged, {})
    monkeypatch.setattr(os, "rename", real_rename)
    info, _ = CheckpointDir(tmp_path).latest_valid()
    assert info is not None and info.step == 10
    assert info.file("model.bin").read_bytes() == b"original ten"


def test_current_attempt_commits_and_raises_the_epoch(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path, attempt=4)
    ckpts.save_bytes(1, {"a": b"x"})
    assert read_epoch(tmp_path) == 4
    unsupervised = CheckpointDir(tmp_path)
    unsupervised.save_bytes(2, {"a": b"y"})  # no attempt: not fenced, records nothing
    assert read_epoch(tmp_path) == 4
    assert [i.step for i in ckpts.list()] == [1, 2]


def test_the_tensor_engine_refuses_a_stale_save(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainguard.ckpt import Checkpointer

    old = Checkpointer(tmp_path, attempt=0, streams=1, stripe_bytes=4096)
    old.save(5, {"w": torch.ones(4)}).wait(30)
    raise_epoch(tmp_path, 1)
    with pytest.raises(StaleEpochError):
        old.save(10, {"w": torch.zeros(4)}).wait(30)
    assert [i.step for i in old.dir.list()] == [5]
