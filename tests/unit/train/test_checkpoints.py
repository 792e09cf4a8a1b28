from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from train_fakes import FakeClock

import trainguard.train as tg
from trainguard.errors import CheckpointError
from trainguard.faultspec import split_faults
from trainguard.train import Checkpoints, Session, TrainEnv

Records = Callable[[Path], list[dict[str, Any]]]


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _ckpts(tmp_path: Path, clock: FakeClock, **env: Any) -> Checkpoints:
    if isinstance(env.get("faults"), str):
        env["faults"] = split_faults(env["faults"])
    session = Session(TrainEnv(events_path=tmp_path / "events.jsonl", rank=0, **env), clock=clock)
    return Checkpoints(tmp_path / "ckpt", keep_last=3, session=session)


def test_save_records_a_checkpoint_event(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)
    saved = ckpts.save_bytes(10, {"state.bin": b"x" * 100})
    [record] = records(tmp_path / "events.jsonl")
    assert record == {
        "t": 1000.0, "rank": 0, "kind": "checkpoint", "step": 10, "path": str(saved.path),
        "size_bytes": 100, "save_s": saved.save_s, "ok": True,
    }  # fmt: skip


def test_failed_save_records_and_reraises(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)

    def boom(f: BinaryIO) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(CheckpointError, match="no space left on device"):
        ckpts.save(20, {"state.bin": boom})
    [record] = records(tmp_path / "events.jsonl")
    assert record["kind"] == "checkpoint" and record["ok"] is False and record["step"] == 20
    assert record["path"] == str(tmp_path / "ckpt" / "step-00000020")
    assert "no space left on device" in record["error"]


def test_latest_falls_back_over_a_corrupted_newest(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)
    for step in (10, 20, 30):
        ckpts.save_bytes(step, {"state.bin": b"step %d" % step})
    _flip_middle_byte(tmp_path / "ckpt" / "step-00000030" / "state.bin")
    info = ckpts.latest()
    assert info is not None and info.step == 20
    resume = records(tmp_path / "events.jsonl")[-1]
    assert resume == {
        "t": 1000.0, "rank": 0, "kind": "resume", "step": 20,
        "path": str(tmp_path / "ckpt" / "step-00000020"),
        "skipped": [{"step": 30, "path": str(tmp_path / "ckpt" / "step-00000030"),
                     "reason": "sha256 mismatch for state.bin"}],
        "source": "disk",
    }  # fmt: skip


def test_latest_with_nothing_to_resume(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    assert _ckpts(tmp_path, clock).latest() is None
    [record] = records(tmp_path / "events.jsonl")
    assert (record["kind"], record["step"], record["path"], record["skipped"]) == (
        "resume", None, None, []
    )  # fmt: skip


def test_resume_max_step_from_the_environment(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock, resume_max_step=25)
    for step in (10, 20, 30):
        ckpts.save_bytes(step, {"state.bin": b"%d" % step})
    info = ckpts.latest()
    assert info is not None and info.step == 20
    assert records(tmp_path / "events.jsonl")[-1]["skipped"][0]["reason"] == "above max_step 25"
    assert ckpts.max_step(15) == 15 and ckpts.max_step(None) == 25 and ckpts.max_step(40) == 25
    info = ckpts.latest(max_step=12)
    assert info is not None and info.step == 10


def test_load_skips_a_checkpoint_the_loader_rejects(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)
    for step in (10, 20):
        ckpts.save_bytes(step, {"state.bin": b"step %d" % step})

    def loader(info: tg.CheckpointInfo) -> bytes:
        if info.step == 20:
            raise EOFError("Ran out of input\nsecond line")
        return info.file("state.bin").read_bytes()

    found = ckpts.load(loader)
    assert found is not None and found[0] == b"step 10" and found[1].step == 10
    skipped = records(tmp_path / "events.jsonl")[-1]["skipped"]
    assert [(s["step"], s["reason"]) for s in skipped] == [
        (20, "load failed: EOFError: Ran out of input")
    ]


def test_load_raises_when_no_intact_checkpoint_loads(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)
    ckpts.save_bytes(10, {"state.bin": b"x"})

    def loader(info: tg.CheckpointInfo) -> None:
        raise ModuleNotFoundError("No module named 'mymodel'")

    with pytest.raises(CheckpointError, match=r"could be loaded.*step 10.*mymodel"):
        ckpts.load(loader)
    resume = records(tmp_path / "events.jsonl")[-1]
    assert resume["kind"] == "resume" and resume["step"] is None and len(resume["skipped"]) == 1


def test_checkpoints_default_to_the_global_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, records: Records
) -> None:
    monkeypatch.setenv("TRAINGUARD_EVENTS", str(tmp_path / "ev.jsonl"))
    monkeypatch.setenv("RANK", "1")
    ckpts = tg.Checkpoints(tmp_path / "ckpt")
    assert ckpts.session is tg.init()
    ckpts.save_bytes(1, {"a": b"a"})
    assert [(r["kind"], r["rank"]) for r in records(tmp_path / "ev.jsonl")] == [
        ("checkpoint", 1)
    ]
