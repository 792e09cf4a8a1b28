from __future__ import annotations

import io
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from train_fakes import FakeClock

from trainguard.ckpt import CheckpointDir
from trainguard.errors import TrainguardError
from trainguard.faultspec import split_faults
from trainguard.recover.watch import RankWatch
from trainguard.train import NonFiniteLossError, Session, TrainEnv

Records = Callable[[Path], list[dict[str, Any]]]


def _env(tmp_path: Path, **kwargs: Any) -> TrainEnv:
    kwargs.setdefault("events_path", tmp_path / "events.jsonl")
    kwargs.setdefault("rank", 0)
    kwargs.setdefault("trace", False)  # tracing has its own tests (test_tracing.py)
    if isinstance(kwargs.get("faults"), str):
        kwargs["faults"] = split_faults(kwargs["faults"])
    return TrainEnv(**kwargs)


def _session(tmp_path: Path, clock: FakeClock, **kwargs: Any) -> Session:
    return Session(_env(tmp_path, **kwargs), clock=clock, sleep=clock.sleep)


def _kinds(records: list[dict[str, Any]]) -> list[str]:
    return [r["kind"] for r in records]


def test_full_record_sequence(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    s = _session(tmp_path, clock, launch_time=990.0, rank=3, heartbeat_s=0.0)
    clock.advance(1)
    with s.phase("dist_init"):
        clock.advance(2)
    clock.advance(1)
    s.step(0, loss=4.5)
    clock.advance(0.25)
    s.step(1, loss=4.0)
    s.finish()
    records = records(tmp_path / "events.jsonl")
    assert records == [
        {"t": 1000.0, "rank": 3, "kind": "phase", "name": "imports", "start": 990.0, "end": 1000.0,
         "begun": "cold"},
        {"t": 1003.0, "rank": 3, "kind": "phase", "name": "dist_init", "start": 1001.0,
         "end": 1003.0},
        {"t": 1004.0, "rank": 3, "kind": "phase", "name": "first_step", "start": 1003.0,
         "end": 1004.0},
        {"t": 1004.0, "rank": 3, "kind": "step", "step": 0, "loss": 4.5, "step_s": None},
        {"t": 1004.25, "rank": 3, "kind": "step", "step": 1, "loss": 4.0, "step_s": 0.25},
        {"t": 1004.25, "rank": 3, "kind": "finish"},
    ]  # fmt: skip


def test_no_imports_phase_without_launch_time(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, rank=None)
    clock.advance(3)
    s.step(0)
    records = records(tmp_path / "events.jsonl")
    assert records[0] == {"t": 1003.0, "rank": None, "kind": "phase", "name": "first_step",
                          "start": 1000.0, "end": 1003.0}  # fmt: skip
    assert records[1]["loss"] is None


def test_failed_phase_is_not_recorded(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock)
    with pytest.raises(KeyError), s.phase("ckpt_load"):
        raise KeyError("model")
    assert not (tmp_path / "events.jsonl").exists() or records(tmp_path / "events.jsonl") == []


def test_steps_are_throttled_to_the_heartbeat(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, heartbeat_s=1.0)
    for step in range(10):
        s.step(step, loss=float(step))
        clock.advance(0.3)
    s.finish()
    steps = [r for r in records(tmp_path / "events.jsonl") if r["kind"] == "step"]
    # t = 1000.0, 1000.3, ...: a record at most every second, the first and last always.
    assert [r["step"] for r in steps] == [0, 4, 8, 9]
    assert [r["t"] for r in steps] == pytest.approx([1000.0, 1001.2, 1002.4, 1002.7])
    assert steps[-1]["step_s"] == pytest.approx(0.3)


def test_held_back_step_precedes_other_records(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, heartbeat_s=10.0)
    s.step(0, loss=1.0)
    clock.advance(1)
    s.step(1, loss=0.9)
    clock.advance(1)
    with pytest.raises(NonFiniteLossError):
        s.step(2, loss=math.inf)
    records = records(tmp_path / "events.jsonl")
    assert _kinds(records) == ["phase", "step", "step", "nonfinite"]
    assert records[2]["step"] == 1 and records[2]["t"] == 1001.0  # written with its own time


def test_close_writes_the_held_back_step(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, heartbeat_s=10.0)
    s.step(0)
    s.step(1)
    s.close()  # what atexit does when the script dies without finish()
    assert [r.get("step") for r in records(tmp_path / "events.jsonl")] == [None, 0, 1]
    s.close()  # idempotent


@pytest.mark.parametrize(
    ("loss", "text"), [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")]
)
def test_nonfinite_loss_raises(
    tmp_path: Path, clock: FakeClock, records: Records, loss: float, text: str
) -> None:
    s = _session(tmp_path, clock)
    s.step(30, loss=1.0)
    with pytest.raises(NonFiniteLossError, match=f"^loss is {text} at step 31$") as info:
        s.step(31, loss=loss)
    assert isinstance(info.value, TrainguardError)
    last = records(tmp_path / "events.jsonl")[-1]
    assert last == {"t": 1000.0, "rank": 0, "kind": "nonfinite", "step": 31, "loss": text}


def test_nonfinite_loss_record_only(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, heartbeat_s=0.0)
    s.step(0, loss=math.nan, on_nonfinite="record")
    clock.advance(1)
    s.step(1, loss=2.0, on_nonfinite="record")
    records = records(tmp_path / "events.jsonl")
    assert _kinds(records) == ["phase", "nonfinite", "step", "step"]
    assert records[2]["loss"] is None and records[3]["loss"] == 2.0


def test_loss_accepts_anything_float_like(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    class Tensorish:
        def __float__(self) -> float:
            return 0.5

    _session(tmp_path, clock).step(0, loss=Tensorish())
    assert records(tmp_path / "events.jsonl")[-1]["loss"] == 0.5


def test_bad_on_nonfinite(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="on_nonfinite"):
        _session(tmp_path, clock).step(0, on_nonfinite="ignore")  # type: ignore[arg-type]


def test_unsupervised_writes_nothing(tmp_path: Path, clock: FakeClock) -> None:
    s = Session(TrainEnv(), clock=clock)
    assert not s.supervised and s.rank == 0 and s.world_size == 1
    with s.phase("dist_init"):
        pass
    s.step(0, loss=1.0)
    with pytest.raises(NonFiniteLossError):  # NaN checks still work
        s.step(1, loss=math.nan)
    s.finish()
    assert list(tmp_path.iterdir()) == []


def test_finish_is_idempotent(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    s = _session(tmp_path, clock)
    s.finish()
    s.finish()
    assert _kinds(records(tmp_path / "events.jsonl")) == ["finish"]


# ---- faults --------------------------------------------------------------------------------


def test_slow_fault_sleeps_every_step_from_its_step(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, faults="slow:step=2,delay=0.5", heartbeat_s=0.0)
    for step in range(5):
        s.step(step, loss=1.0)
        clock.advance(0.1)
    assert clock.slept == [0.5, 0.5, 0.5]
    records = records(tmp_path / "events.jsonl")
    faults = [r for r in records if r["kind"] == "fault"]
    assert faults == [{"t": 1000.2, "rank": 0, "kind": "fault", "fault": "slow:step=2",
                       "step": 2}]  # fmt: skip
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["step_s"] for r in steps] == pytest.approx([None, 0.1, 0.6, 0.6, 0.6])


def test_nan_fault_poisons_the_loss(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = _session(tmp_path, clock, faults="nan:step=3")
    for step in range(3):
        s.step(step, loss=1.0)
    with pytest.raises(NonFiniteLossError, match="loss is nan at step 3"):
        s.step(3, loss=1.0)
    records = records(tmp_path / "events.jsonl")
    assert _kinds(records)[-2:] == ["fault", "nonfinite"]
    assert records[-2]["fault"] == "nan:step=3"


def test_nan_fault_fires_once(tmp_path: Path, clock: FakeClock) -> None:
    s = _session(tmp_path, clock, faults="nan:step=1")
    s.step(0, loss=1.0)
    s.step(1, loss=1.0, on_nonfinite="record")
    s.step(2, loss=1.0)  # no error: the fault is spent


def test_exception_fault(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    s = _session(tmp_path, clock, faults="exception:step=17,rank=0")
    s.step(16, loss=1.0)
    with pytest.raises(RuntimeError, match=r"^trainguard injected exception at step 17$"):
        s.step(17, loss=1.0)
    assert records(tmp_path / "events.jsonl")[-1]["kind"] == "fault"


def test_cuda_error_fault_prints_traceback_and_exits(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    stderr = io.StringIO()
    codes: list[int] = []

    def fake_exit(code: int) -> NoReturn:
        codes.append(code)
        raise SystemExit(code)

    s = Session(_env(tmp_path, faults=split_faults("cuda_error:step=5,code=3")), clock=clock,
                stderr=stderr, exit_process=fake_exit)  # fmt: skip
    s.step(4)
    with pytest.raises(SystemExit):
        s.step(5)
    assert codes == [3]
    text = stderr.getvalue()
    assert text.startswith("Traceback (most recent call last):")
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in text
    last = records(tmp_path / "events.jsonl")[-1]
    assert (last["kind"], last["fault"], last["step"]) == ("fault", "cuda_error:step=5,code=3", 5)


def test_fault_reached_after_a_resume_past_its_step(tmp_path: Path, clock: FakeClock) -> None:
    s = _session(tmp_path, clock, faults="exception:step=17")
    with pytest.raises(RuntimeError):
        s.step(20)  # "reaches" step 17 even when it starts past it


def test_after_s_condition(tmp_path: Path, clock: FakeClock) -> None:
    s = _session(tmp_path, clock, faults="exception:after=5", launch_time=998.0)
    s.step(0)
    clock.advance(2.5)
    s.step(1)  # 4.5 s after launch
    clock.advance(1)
    with pytest.raises(RuntimeError, match="at step 2"):
        s.step(2)


@pytest.mark.parametrize(
    ("spec", "attempt", "rank", "node", "fires"),
    [
        ("exception", 0, 0, None, True),
        ("exception", 1, 0, None, False),
        ("exception:attempt=*", 4, 0, None, True),
        ("exception:attempt=1", 1, 0, None, True),
        ("exception:rank=1", 0, 0, None, False),
        ("exception:rank=1", 0, 1, None, True),
        ("exception:node=n1", 0, 0, "n2", False),
        ("exception:node=n1", 0, 0, "n1", True),
        ("kill:rank=0", 0, 0, None, False),  # supervisor kinds are not the SDK's
        ("hang;xid", 0, 0, None, False),
    ],
)
def test_fault_targeting(
    tmp_path: Path,
    clock: FakeClock,
    spec: str,
    attempt: int,
    rank: int,
    node: str | None,
    fires: bool,
) -> None:
    s = _session(tmp_path, clock, faults=spec, attempt=attempt, rank=rank, node=node)
    if fires:
        with pytest.raises(RuntimeError, match="injected exception"):
            s.step(0)
    else:
        s.step(0)


def test_corrupt_checkpoint_fault(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    s = _session(tmp_path, clock, faults="corrupt_checkpoint:step=20")
    ckpts = CheckpointDir(tmp_path / "ckpt", keep_last=5)
    for step in (10, 20, 30):
        saved = ckpts.save_bytes(step, {"big.bin": bytes(range(256)) * 4, "small.bin": b"s"})
        s.checkpoint_saved(saved)
    reasons = {info.step: ckpts.validate(info) for info in ckpts.list()}
    assert reasons == {10: None, 20: "sha256 mismatch for big.bin", 30: None}  # once, largest
    assert (tmp_path / "ckpt" / "step-00000020" / "big.bin").stat().st_size == 1024
    records = records(tmp_path / "events.jsonl")
    assert [(r["kind"], r["step"]) for r in records] == [
        ("checkpoint", 10), ("checkpoint", 20), ("fault", 20), ("checkpoint", 30)
    ]  # fmt: skip


def test_forked_child_writes_nothing(tmp_path: Path, clock: FakeClock, records: Records) -> None:
    s = _session(tmp_path, clock, heartbeat_s=10.0)
    s.step(0)
    s.step(1)  # held back
    pid = os.fork()
    if pid == 0:  # a DataLoader-style worker: whatever it does must not reach the event file
        try:
            s.step(2)
            s.finish()
            s.close()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    s.finish()
    got = records(tmp_path / "events.jsonl")
    assert [(r["kind"], r.get("step")) for r in got] == [
        ("phase", None), ("step", 0), ("step", 1), ("finish", None)
    ]  # fmt: skip


def test_imports_phase_from_process_start_without_launch_time(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = Session(_env(tmp_path), clock=clock, sleep=clock.sleep, process_start=lambda: 997.5)
    s.step(0)
    assert records(tmp_path / "events.jsonl")[0] == {
        "t": 1000.0, "rank": 0, "kind": "phase", "name": "imports", "start": 997.5, "end": 1000.0,
        "begun": "cold"
    }  # fmt: skip


def test_a_rank_run_in_a_standby_says_it_began_warm(
    tmp_path: Path, clock: FakeClock, records: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINGUARD_WARM_START", "1")
    s = Session(_env(tmp_path), clock=clock, sleep=clock.sleep, process_start=lambda: 997.5)
    s.step(0)
    assert records(tmp_path / "events.jsonl")[0]["begun"] == "warm"


def test_launch_time_wins_over_process_start(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = Session(_env(tmp_path, launch_time=990.0), clock=clock, process_start=lambda: 997.5)
    s.step(0)
    got = records(tmp_path / "events.jsonl")
    assert [(r.get("name"), r.get("start")) for r in got[:2]] == [
        ("imports", 990.0), ("first_step", 1000.0)
    ]  # fmt: skip


def test_inferred_imports_phase_goes_out_with_the_first_phase(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = Session(_env(tmp_path), clock=clock, sleep=clock.sleep, process_start=lambda: 997.5)
    s.record("checkpoint", step=1)
    clock.advance(2)
    with s.phase("dist_init"):
        clock.advance(1)
    got = [(r["t"], r["kind"], r.get("name")) for r in records(tmp_path / "events.jsonl")]
    assert got == [
        (1000.0, "checkpoint", None), (1000.0, "phase", "imports"), (1003.0, "phase", "dist_init")
    ]  # fmt: skip


def test_unreadable_process_start_skips_the_imports_phase(
    tmp_path: Path, clock: FakeClock, records: Records
) -> None:
    s = Session(_env(tmp_path), clock=clock, process_start=lambda: None)
    s.step(0)
    assert [r.get("name") for r in records(tmp_path / "events.jsonl")] == ["first_step", None]


def test_real_clock_reads_the_process_start(tmp_path: Path, records: Records) -> None:
    s = Session(_env(tmp_path))
    s.step(0)
    s.close()
    got = records(tmp_path / "events.jsonl")
    if os.path.exists("/proc/self/stat"):
        assert got[0]["name"] == "imports" and got[0]["start"] <= got[0]["end"]


class _FakeDist:
    """torch.distributed as the SDK sees it once the job initialized its process group."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def get_backend() -> str:
        return "gloo"


def test_first_step_says_the_distributed_backend(
    tmp_path: Path, clock: FakeClock, records: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.distributed", _FakeDist)
    s = _session(tmp_path, clock)
    s.step(0)
    (first,) = [r for r in records(tmp_path / "events.jsonl") if r.get("name") == "first_step"]
    assert first["backend"] == "gloo"
    # the supervisor's watch of the rank keeps it (a hang then says "gloo", never NCCL)
    w = RankWatch(0, "n1", tmp_path / "out.log", tmp_path / "events.jsonl", 0.0)
    w.poll(1.0)
    assert w.backend == "gloo"
