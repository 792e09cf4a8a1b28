from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from train_fakes import FakeClock

import trainguard.train as tg
from trainguard.faultspec import split_faults
from trainguard.train import Checkpoints, Session, TrainEnv

Records = Callable[[Path], list[dict[str, Any]]]


torch = pytest.importorskip("torch", reason="torch is not installed: pip install trainguard[torch]")


def _ckpts(tmp_path: Path, clock: FakeClock, **env: Any) -> Checkpoints:
    if isinstance(env.get("faults"), str):
        env["faults"] = split_faults(env["faults"])
    session = Session(TrainEnv(events_path=tmp_path / "events.jsonl", rank=0, **env), clock=clock)
    return Checkpoints(tmp_path / "ckpt", keep_last=3, session=session)


def test_save_and_load_torch(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    ckpts = _ckpts(tmp_path, clock)
    assert tg.load_torch(ckpts) == (None, 0)
    state = {"w": torch.arange(6.0).reshape(2, 3), "step": 40, "name": "gpt"}
    saved = tg.save_torch(ckpts, 40, state)
    assert saved.path.name == "step-00000040" and (saved.path / "rank00000-state.pkl").is_file()
    assert ckpts.is_tensor_checkpoint(ckpts.list()[-1])
    loaded, step = tg.load_torch(ckpts)
    assert step == 40 and loaded["name"] == "gpt" and torch.equal(loaded["w"], state["w"])
    saved = tg.save_torch(ckpts, 50, {"x": 1}, name="other.pt")  # one torch.save file
    assert (saved.path / "other.pt").is_file()
    assert tg.load_torch(ckpts, name="other.pt") == ({"x": 1}, 50)
    saved = tg.save_torch(ckpts, 60, {"y": 2}, name="state.pt")
    assert tg.load_torch(ckpts) == ({"y": 2}, 60)  # default reads legacy state.pt files too


def test_save_state_returns_early_and_records_blocking_time(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)
    state = {"w": torch.randn(100_000), "step": 10}
    expected = state["w"].clone()
    pending = ckpts.save_state(10, state)
    state["w"].zero_()  # training goes on
    [saved] = ckpts.wait()
    assert saved.step == 10 and pending.done()
    [record] = [r for r in records(tmp_path / "events.jsonl") if r["kind"] == "checkpoint"]
    assert record["ok"] and record["step"] == 10 and record["size_bytes"] == saved.size_bytes
    assert 0 <= record["blocking_s"] <= record["save_s"]
    found = ckpts.load_state()
    assert found is not None
    loaded, info = found
    assert info.step == 10 and torch.equal(loaded["w"], expected)  # type: ignore[index]


def test_load_state_skips_a_corrupt_newest_and_honours_the_rollback_bound(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock, faults="corrupt_checkpoint:step=30")
    for step in (10, 20, 30):
        ckpts.save_state(step, {"step": step, "w": torch.full((5000,), float(step))})
        ckpts.wait()
    found = ckpts.load_state()
    assert found is not None and found[1].step == 20
    resume = records(tmp_path / "events.jsonl")[-1]
    assert resume["kind"] == "resume" and resume["step"] == 20
    [skipped] = resume["skipped"]
    assert skipped["step"] == 30 and "crc32 mismatch for rank00000-data-" in skipped["reason"]
    bounded = _ckpts(tmp_path, clock, resume_max_step=15)
    found = bounded.load_state()
    assert found is not None and found[1].step == 10


def test_load_torch_falls_back_when_torch_load_fails(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock)
    tg.save_torch(ckpts, 10, {"step": 10})
    # Hashes pass but the content is not a torch file: written like this by a buggy writer.
    ckpts.save_bytes(20, {"state.pt": b"definitely not a zip file"})
    obj, step = tg.load_torch(ckpts)
    assert (obj, step) == ({"step": 10}, 10)
    [skipped] = records(tmp_path / "events.jsonl")[-1]["skipped"]
    assert skipped["step"] == 20 and skipped["reason"].startswith("load failed: ")


def test_load_torch_falls_back_over_a_corrupted_checkpoint(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    ckpts = _ckpts(tmp_path, clock, faults="corrupt_checkpoint:step=20")
    for step in (10, 20):
        tg.save_torch(ckpts, step, {"step": step, "w": torch.ones(1000) * step})
    obj, step = tg.load_torch(ckpts)
    assert step == 10 and obj["step"] == 10
    kinds = [r["kind"] for r in records(tmp_path / "events.jsonl")]
    assert kinds == ["checkpoint", "checkpoint", "fault", "resume"]


def test_nonfinite_tensor_loss(tmp_path: Path, clock: FakeClock) -> None:
    session = Session(TrainEnv(), clock=clock)
    with pytest.raises(tg.NonFiniteLossError, match="loss is nan at step 3"):
        session.step(3, loss=torch.tensor(math.nan))
