"""The SDK's memory tier: snapshots into double-buffered slots, adaptive K, space checks,
restore verified against what the supervisor chose, and its wiring into `Checkpoints`."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import trainguard.snapshot.tier as tier_mod  # noqa: E402
from trainguard.errors import ConfigError, SnapshotError  # noqa: E402
from trainguard.snapshot.interval import IntervalConfig  # noqa: E402
from trainguard.snapshot.slot import newest_slot, read_header, slot_paths  # noqa: E402
from trainguard.snapshot.tier import MemoryTier, RestoreSpec, TierSettings  # noqa: E402
from trainguard.train import Checkpoints, Session, TrainEnv, load_torch  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _tier(directory: Path, every: int | None = 1, *, rank: int = 0, attempt: int = 0,
          restore: RestoreSpec | None = None, **kwargs: Any) -> MemoryTier:
    interval = IntervalConfig() if every is None else IntervalConfig(every=every)
    settings = TierSettings(directory=directory, interval=interval, restore=restore,
                            attempt=attempt, rank=rank, world=2, node="n1")
    return MemoryTier(settings, **kwargs)


def _state(seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 32, generator=gen), "ids": torch.arange(seed, seed + 10),
            "step": seed}


def _spec(path: Path, **override: Any) -> RestoreSpec:
    header = read_header(path)
    assert header is not None
    fields = {"step": header.step, "attempt": header.attempt, "digest": header.digest,
              "path": path, "source": "local", "holder": "n1"} | override
    return RestoreSpec(**fields)


def test_settings_from_environ() -> None:
    s = TierSettings.from_environ({
        "TRAINGUARD_SNAPSHOT_DIR": "/d", "TRAINGUARD_SNAPSHOT_EVERY": "7", "RANK": "3",
        "WORLD_SIZE": "4", "TRAINGUARD_ATTEMPT": "2", "TRAINGUARD_NODE": "n9",
        "TRAINGUARD_RESTORE": json.dumps({"step": 40, "attempt": 1, "digest": "0a0b0c0d",
                                          "path": "/d/own/rank00003.a", "source": "buddy",
                                          "holder": "n2"})})  # fmt: skip
    assert (s.directory, s.interval, s.rank, s.world, s.attempt, s.node) == (
        Path("/d"), IntervalConfig(every=7), 3, 4, 2, "n9")
    assert s.restore == RestoreSpec(40, 1, "0a0b0c0d", Path("/d/own/rank00003.a"), "buddy", "n2")
    assert TierSettings.from_environ({}).directory is None
    assert TierSettings.from_environ({}).interval == IntervalConfig()
    assert TierSettings.from_environ({"TRAINGUARD_SNAPSHOT_EVERY": "off"}).interval is None


@pytest.mark.parametrize(("env", "message"), [
    ({"TRAINGUARD_SNAPSHOT_EVERY": "often"}, "TRAINGUARD_SNAPSHOT_EVERY must be an integer"),
    ({"TRAINGUARD_SNAPSHOT_EVERY": "0"}, "TRAINGUARD_SNAPSHOT_EVERY must be auto, off or >= 1"),
    ({"TRAINGUARD_RESTORE": "{"}, "TRAINGUARD_RESTORE is malformed"),
    ({"TRAINGUARD_RESTORE": '{"step": 1}'}, "TRAINGUARD_RESTORE is malformed"),
    ({"TRAINGUARD_RESTORE": json.dumps({"step": 1, "attempt": 0, "digest": "x", "path": "/p",
                                        "source": "disk"})}, "source 'disk'"),
])  # fmt: skip
def test_malformed_settings(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TierSettings.from_environ(env)


def test_off_without_a_directory_and_the_state_is_not_built(tmp_path: Path) -> None:
    def never() -> object:
        raise AssertionError("called")

    assert not MemoryTier(TierSettings()).maybe_snapshot(1, never)
    off = TierSettings(directory=tmp_path, interval=None)
    assert not MemoryTier(off).maybe_snapshot(1, never)
    assert not (tmp_path / "own").exists()


def test_snapshots_alternate_slots_and_restore_bit_for_bit(tmp_path: Path) -> None:
    t = _tier(tmp_path, every=1, rank=1, attempt=3)
    for step in (1, 2, 3):
        assert t.maybe_snapshot(step, _state(step))
    t.wait()
    a, b = slot_paths(tmp_path / "own", 1)
    assert [r.path for r in t.history] == [a, b, a]
    assert all(r.blocking_s >= 0 and r.payload_bytes > 0 for r in t.history)
    found = newest_slot(tmp_path / "own", 1)
    assert found is not None and found[0] == a
    header = found[1]
    assert (header.step, header.attempt, header.rank, header.world, header.node) == (
        3, 3, 1, 2, "n1")
    assert read_header(b) is not None and read_header(b).step == 2  # type: ignore[union-attr]
    t.close()
    restored = _tier(tmp_path, rank=1, restore=_spec(a, source="buddy")).restore()
    assert restored is not None and (restored.step, restored.source) == (3, "buddy")
    expected = _state(3)
    assert restored.state["step"] == 3 and torch.equal(restored.state["ids"], expected["ids"])
    assert restored.state["w"].view(torch.int32).equal(expected["w"].view(torch.int32))
    local = _tier(tmp_path, rank=1, restore=_spec(b)).restore()
    assert local is not None and (local.step, local.source) == (2, "memory")


def test_adaptive_interval_from_measured_times(tmp_path: Path) -> None:
    clock = Clock()
    t = _tier(tmp_path, every=None, clock=clock)

    def slow_state(step: int) -> Callable[[], object]:
        def build() -> object:
            clock.now += 0.1  # this snapshot stalls training 0.1 s
            return {"step": step}
        return build

    taken = []
    for step in range(1, 25):
        clock.now += 1.0  # a 1 s step
        if t.maybe_snapshot(step, slow_state(step)):
            taken.append(step)
    t.close()
    # The first call snapshots at once (it measures the stall); after 8 measured steps the
    # ranks agree on K: 0.1 s / K <= 2 % of 1 s gives K = 5, rounded up to 8, on multiples
    # of 8 (the steps every rank snapshots).
    assert taken == [1, 16, 24]
    assert t.every() == 8
    assert [round(r.blocking_s, 6) for r in t.history] == [0.1] * 3


def test_ranks_agree_on_one_interval(tmp_path: Path) -> None:
    """Ranks measure slightly different times; the K they use is the agreed one (the
    process group's largest), asked once."""
    asked: list[int] = []

    def agree(k: int) -> int:
        asked.append(k)
        return 32

    clock = Clock()
    t = _tier(tmp_path, every=None, clock=clock, agree=agree)
    taken = [step for step in range(1, 70)
             if (clock.__setattr__("now", clock.now + 0.1) or True)
             and t.maybe_snapshot(step, lambda: {"x": 1})]
    t.close()
    # 0.5 s apart at 100 ms a step: K = 5, rounded up to 8; another rank asked for 32.
    assert asked == [8] and t.every() == 32
    assert taken == [1, 32, 64]


def test_torn_slot_is_never_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _tier(tmp_path)
    t.maybe_snapshot(1, _state(1))
    t.wait()
    real = tier_mod.write_state

    def killed(plan: Any, payload: memoryview, threads: int = 1) -> None:
        payload[: len(payload) // 2] = b"\xff" * (len(payload) // 2)
        raise KeyboardInterrupt  # the process dies mid-copy

    monkeypatch.setattr(tier_mod, "write_state", killed)
    with pytest.raises(KeyboardInterrupt):
        t.maybe_snapshot(2, _state(2))
    monkeypatch.setattr(tier_mod, "write_state", real)
    a, b = slot_paths(tmp_path / "own", 0)
    assert read_header(b) is None  # header zeroed before the copy: not a snapshot
    found = newest_slot(tmp_path / "own", 0)
    assert found is not None and found[0] == a and found[1].step == 1  # the last good one
    t.close()
    spec = RestoreSpec(2, 0, "00000000", b, "local", "n1")
    with pytest.raises(SnapshotError, match=r"rank00000\.b is missing, torn or not committed"):
        _tier(tmp_path, restore=spec).restore()


@pytest.mark.parametrize(("override", "message"), [
    ({"attempt": 1}, r"not the chosen step 1 of attempt 1 .*stale or overwritten"),
    ({"digest": "deadbeef"}, r"digest deadbeef\): stale or overwritten"),
    ({"step": 9}, "not the chosen step 9"),
])  # fmt: skip
def test_stale_slot_is_refused(tmp_path: Path, override: dict[str, Any], message: str) -> None:
    t = _tier(tmp_path)
    t.maybe_snapshot(1, _state(1))
    t.close()
    a, _ = slot_paths(tmp_path / "own", 0)
    with pytest.raises(SnapshotError, match=message):
        _tier(tmp_path, restore=_spec(a, **override)).restore()


def test_corrupted_payload_and_foreign_rank_are_refused(tmp_path: Path) -> None:
    t = _tier(tmp_path)
    t.maybe_snapshot(1, _state(1))
    t.close()
    a, _ = slot_paths(tmp_path / "own", 0)
    spec = _spec(a)
    with pytest.raises(SnapshotError, match="holds rank 0, not rank 1"):
        _tier(tmp_path, rank=1, restore=spec).restore()
    with open(a, "r+b") as f:
        f.seek(4096 + 8192)
        f.write(b"\x01\x02\x03")
    with pytest.raises(SnapshotError, match=r"does not match the header's .*torn or corrupted"):
        _tier(tmp_path, restore=spec).restore()


def _vfs(free: int) -> Callable[[Path], os.statvfs_result]:
    return lambda path: os.statvfs_result((4096, 4096, 0, 0, free // 4096, 0, 0, 0, 0, 255))


def test_free_space_refusal_names_the_figures(tmp_path: Path) -> None:
    state = {"w": torch.zeros(1 << 18)}  # 1 MiB
    t = _tier(tmp_path, statvfs=_vfs(3 << 20), meminfo=lambda: 2 << 20)
    with pytest.raises(SnapshotError, match=(
            r"rank 0 need 4 x 0\.00 GiB = 0\.00 GiB .*but .*own has 0\.00 GiB free and "
            r"MemAvailable is 0\.00 GiB")):
        t.maybe_snapshot(1, state)
    assert t.history == []
    roomy = _tier(tmp_path, statvfs=_vfs(5 << 20), meminfo=lambda: None)
    assert roomy.maybe_snapshot(1, state)
    roomy.close()


def test_free_space_figures_in_gib(tmp_path: Path) -> None:
    t = _tier(tmp_path, statvfs=_vfs(1 << 40), meminfo=lambda: 3 << 30)
    with pytest.raises(SnapshotError, match=r"need 4 x 1\.00 GiB = 4\.00 GiB .*but "
                       r"MemAvailable is 3\.00 GiB; set TRAINGUARD_SNAPSHOT_EVERY=off"):
        t.check_space((1 << 30) - 4096)


def _ckpts(tmp_path: Path, tier: MemoryTier) -> Checkpoints:
    session = Session(TrainEnv(events_path=tmp_path / "events.jsonl", rank=0))
    return Checkpoints(tmp_path / "ckpt", session=session, tier=tier)


def _resumes(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "resume"]


def test_checkpoints_snapshot_and_restore_from_memory(tmp_path: Path) -> None:
    snaps = tmp_path / "snap"
    ckpts = _ckpts(tmp_path, _tier(snaps, every=3))
    assert ckpts.snapshot(1, lambda: _state(1))
    assert not ckpts.snapshot(2, lambda: _state(2))
    assert ckpts.snapshot(3, _state(3))
    ckpts.save_state(3, _state(3))  # a disk checkpoint too: memory wins when chosen
    ckpts.wait()
    found = newest_slot(snaps / "own", 0)
    assert found is not None and found[0] == slot_paths(snaps / "own", 0)[1]
    a = found[0]
    after = _ckpts(tmp_path, _tier(snaps, restore=_spec(a)))
    state, step = load_torch(after)
    assert step == 3 and torch.equal(state["w"], _state(3)["w"])
    loaded = _ckpts(tmp_path, _tier(snaps, restore=_spec(a, source="buddy"))).load_state()
    assert loaded is not None and loaded[1].step == 3 and loaded[1].path == a
    assert [(r["step"], r["source"], r["path"]) for r in _resumes(tmp_path)] == [
        (3, "memory", str(a)), (3, "buddy", str(a))]
    disk = _ckpts(tmp_path, _tier(snaps))  # no TRAINGUARD_RESTORE: from disk, as before
    assert load_torch(disk)[1] == 3
    assert _resumes(tmp_path)[-1]["source"] == "disk"
    assert _resumes(tmp_path)[-1]["path"] == str(tmp_path / "ckpt" / "step-00000003")


def test_a_bad_slot_propagates_instead_of_falling_back(tmp_path: Path) -> None:
    snaps = tmp_path / "snap"
    ckpts = _ckpts(tmp_path, _tier(snaps))
    ckpts.snapshot(1, _state(1))
    ckpts.save_state(1, _state(1))
    ckpts.wait()
    a, _ = slot_paths(snaps / "own", 0)
    bad = _ckpts(tmp_path, _tier(snaps, restore=_spec(a, attempt=5)))
    with pytest.raises(SnapshotError, match="stale or overwritten"):
        load_torch(bad)
    with pytest.raises(SnapshotError, match="stale or overwritten"):
        bad.load_state()


def test_a_newer_slot_from_a_failed_attempt_does_not_break_double_buffering(
        tmp_path: Path) -> None:
    old = _tier(tmp_path, attempt=0)
    for step in (17, 19):  # this rank ran ahead of the others before the failure
        old.maybe_snapshot(step, _state(step))
    old.close()
    a, b = slot_paths(tmp_path / "own", 0)
    restored_from = a  # step 17 of attempt 0 (all ranks held it); b holds step 19
    new = _tier(tmp_path, attempt=1, restore=_spec(restored_from))
    assert new.restore() is not None
    for step in (18, 19, 20):
        new.maybe_snapshot(step, _state(step))
    new.close()
    # Alternating a, b, a: the two newest snapshots of the new attempt are both kept.
    assert [r.path for r in new.history] == [a, b, a]
    headers = [read_header(p) for p in (a, b)]
    assert [(h.step, h.attempt) for h in headers if h is not None] == [(20, 1), (19, 1)]
