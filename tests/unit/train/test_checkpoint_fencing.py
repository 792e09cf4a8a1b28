"""The SDK carries the attempt: opening the checkpoint directory raises its epoch, and a save
of a fenced (older) attempt is refused and recorded as failed (issue 26, "Fencing")."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_fakes import FakeClock, read_records

from trainguard.ckpt.epoch import StaleEpochError, read_epoch
from trainguard.train import Checkpoints, Session, TrainEnv


def _ckpts(tmp_path: Path, clock: FakeClock, attempt: int, name: str) -> Checkpoints:
    env = TrainEnv(events_path=tmp_path / f"{name}.jsonl", rank=0, attempt=attempt)
    return Checkpoints(tmp_path / "ckpt", session=Session(env, clock=clock))


def test_a_new_attempt_fences_the_old_one(tmp_path: Path, clock: FakeClock) -> None:
    old = _ckpts(tmp_path, clock, 0, "old")
    old.save_bytes(10, {"state.bin": b"ten"})
    assert read_epoch(tmp_path / "ckpt") == 0
    new = _ckpts(tmp_path, clock, 1, "new")  # the relaunch's rank starts
    assert read_epoch(tmp_path / "ckpt") == 1
    with pytest.raises(StaleEpochError, match="belongs to attempt 0"):
        old.save_bytes(20, {"state.bin": b"stale twenty"})
    failed = [r for r in read_records(tmp_path / "old.jsonl") if r["kind"] == "checkpoint"]
    assert failed[-1]["ok"] is False and "refused" in failed[-1]["error"]
    latest = new.latest()
    assert latest is not None and latest.step == 10
    new.save_bytes(20, {"state.bin": b"twenty"})
    latest = new.latest()
    assert latest is not None and latest.file("state.bin").read_bytes() == b"twenty"


def test_a_stale_rank_starting_late_is_refused_at_once(tmp_path: Path,
                                                      clock: FakeClock) -> None:
    _ckpts(tmp_path, clock, 3, "new")
    with pytest.raises(StaleEpochError):
        _ckpts(tmp_path, clock, 2, "late")


def test_unsupervised_checkpoints_are_not_fenced(tmp_path: Path) -> None:
    Checkpoints(tmp_path / "ckpt").save_bytes(1, {"a": b"x"})
    assert read_epoch(tmp_path / "ckpt") is None
