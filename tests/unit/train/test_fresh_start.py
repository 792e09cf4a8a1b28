"""Checkpoints that none can be read are never silently replaced by a run from step 0: loading
refuses (listing each and why) unless ``allow_fresh_start``, and with it the new run's saves keep
every one of them on disk."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from train_fakes import FakeClock

import trainguard.train as tg
from trainguard.ckpt import MANIFEST_NAME, corrupt_checkpoint
from trainguard.errors import CheckpointError
from trainguard.train import Checkpoints, Session, TrainEnv

torch = pytest.importorskip("torch")

Records = Callable[[Path], list[dict[str, Any]]]


def _ckpts(tmp_path: Path, clock: FakeClock, **env: Any) -> Checkpoints:
    session = Session(TrainEnv(events_path=tmp_path / "events.jsonl", rank=0, **env), clock=clock)
    return Checkpoints(tmp_path / "ckpt", keep_last=3, session=session, stripe_bytes=4096)


def _edit_manifest(step_dir: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((step_dir / MANIFEST_NAME).read_text())
    edit(manifest)
    manifest.pop("manifest_sha256")
    (step_dir / MANIFEST_NAME).write_text(json.dumps(manifest))


def _newer_format(step_dir: Path) -> None:
    _edit_manifest(step_dir, lambda m: m.update(format="trainguard-checkpoint/2"))


def _unknown_checksum(step_dir: Path) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        for entry in manifest["files"].values():
            if "crc32" in entry:
                entry["xxh64"] = entry.pop("crc32") * 2

    _edit_manifest(step_dir, edit)


def _damaged(step_dir: Path) -> None:
    corrupt_checkpoint(step_dir)


CASES = {
    "newer format version": (_newer_format, "wrong format 'trainguard-checkpoint/2'"),
    "unknown checksum name": (_unknown_checksum, "needs exactly one checksum of sha256, crc32"),
    "all damaged": (_damaged, "crc32 mismatch for rank00000-data-"),
}


def _files(root: Path) -> list[dict[str, bytes]]:
    return [{f.name: f.read_bytes() for f in d.iterdir()}
            for d in sorted(root.iterdir()) if d.is_dir()]


@pytest.mark.parametrize(("damage", "reason"), list(CASES.values()), ids=list(CASES))
def test_unreadable_checkpoints_refuse_a_fresh_start_and_are_never_deleted(
    tmp_path: Path, clock: FakeClock, records: Records, damage: Callable[[Path], None],
    reason: str,
) -> None:
    earlier = _ckpts(tmp_path, clock)
    for step in (10, 20, 30):
        tg.save_torch(earlier, step, {"step": step, "w": torch.full((3000,), float(step))})
        damage(tmp_path / "ckpt" / f"step-{step:08d}")
    before = _files(tmp_path / "ckpt")

    ckpts = _ckpts(tmp_path, clock)  # the next process
    with pytest.raises(CheckpointError, match="refusing to start from scratch") as refused:
        tg.load_torch(ckpts)
    message = str(refused.value)
    assert "none of the 3 checkpoint(s)" in message and "allow_fresh_start=True" in message
    for step in (30, 20, 10):
        assert f"step {step} (step-{step:08d}): " in message
    assert message.count(reason) == 3
    with pytest.raises(CheckpointError, match="refusing to start from scratch"):
        ckpts.load_state()
    assert records(tmp_path / "events.jsonl")[-1]["step"] is None

    assert tg.load_torch(ckpts, allow_fresh_start=True) == (None, 0)
    for step in range(0, 60, 10):  # collides with 10, 20, 30; passes them; keep_last=3
        tg.save_torch(ckpts, step, {"step": step, "w": torch.zeros(3000)})
        after = _files(tmp_path / "ckpt")
        for files in before:
            assert files in after, f"an unreadable checkpoint was deleted by the save of {step}"
    assert [i.step for i in ckpts.list()] == [30, 40, 50]  # the new run's, keep_last=3
    moved = sorted(p.name[:24] for p in (tmp_path / "ckpt").glob("unreadable-*"))
    assert moved == [f"unreadable-step-{s:08d}" for s in (10, 20, 30)]  # re-saves moved them
    obj, step = tg.load_torch(_ckpts(tmp_path, clock))  # the run after resumes from its own
    assert step == 50 and obj["step"] == 50


def test_an_empty_directory_is_a_fresh_run(tmp_path: Path, clock: FakeClock) -> None:
    assert tg.load_torch(_ckpts(tmp_path, clock)) == (None, 0)
    assert _ckpts(tmp_path, clock).load_state() is None


def test_checkpoints_above_the_resume_bound_are_not_unreadable(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A rollback to before the first checkpoint starts from scratch without an opt-in."""
    earlier = _ckpts(tmp_path, clock)
    for step in (10, 20):
        earlier.save_bytes(step, {"state.bin": b"%d" % step})
    assert _ckpts(tmp_path, clock, resume_max_step=5).latest() is None
    damaged = _ckpts(tmp_path, clock, resume_max_step=15)
    corrupt_checkpoint(tmp_path / "ckpt" / "step-00000010")
    with pytest.raises(CheckpointError, match=r"none of the 1 checkpoint\(s\).*step 10 "):
        damaged.latest()
    assert damaged.latest(allow_fresh_start=True) is None
