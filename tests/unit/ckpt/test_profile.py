"""`run_profile` on a few MiB in tmp_path (real PyTorch, CPU): every stage and baseline present,
the best configuration consistent with the numbers, sizes and config validated, pre-flight
checks, and the scratch directory removed whatever happens. No timing assertions."""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import trainguard.ckpt.profile as profile_mod  # noqa: E402
import trainguard.ckpt.profile_io as profile_io  # noqa: E402
from trainguard.ckpt.profile import (  # noqa: E402
    STAGES,
    WORK_PREFIX,
    Comparison,
    ProfileConfig,
    ProfileResult,
    check_target,
    default_repeat,
    memory_needed,
    run_profile,
    space_needed,
)
from trainguard.ckpt.profile_io import model_shapes, probe_direct, stream_bytes  # noqa: E402
from trainguard.errors import CheckpointError, ConfigError  # noqa: E402

MiB = 1 << 20
SIZE = 2 * MiB
STREAMS = (1, 2, 4)
BASELINES = {"torch_save", "torch_fsync", "torch_total", "torch_load", "raw_write", "raw_fsync",
             "raw_total", "raw_read", "first_touch"}


def _cfg(directory: Path, **kw: Any) -> ProfileConfig:
    """Small and quick: 2 MiB in 256 KiB stripes (8 stripes, so 4 streams make 4 files)."""
    args: dict[str, Any] = {"size_bytes": SIZE, "streams": STREAMS, "stripe_bytes": 256 << 10,
                            "repeat": 2, "device": "cpu"}
    args.update(kw)
    return ProfileConfig(directory, **args)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProfileResult, Path]:
    directory = tmp_path_factory.mktemp("profile")
    return run_profile(_cfg(directory)), directory


# --- sizes ---------------------------------------------------------------------------------------


def test_default_repeat() -> None:
    assert [default_repeat(s) for s in (MiB, 4 << 30, (4 << 30) + 1, 32 << 30, 64 << 30)] == [
        3, 3, 2, 2, 1]


@pytest.mark.parametrize("size", [MiB, MiB + 3, 5 * MiB + 7, 300 * MiB])
def test_model_shapes_hold_exactly_the_size(size: int) -> None:
    itemsize = {"bfloat16": 2, "float32": 4, "uint8": 1}
    shapes = model_shapes(size)
    assert sum(math.prod(s) * itemsize[d] for _, d, s in shapes) == size
    assert stream_bytes(size) >= size


# --- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "message"), [
    ({"size_bytes": 0}, "profile.size_bytes must be >= 1 MiB"),
    ({"size_bytes": MiB - 1}, "profile.size_bytes"),
    ({"size_bytes": 2.0}, "profile.size_bytes"),
    ({"size_bytes": True}, "profile.size_bytes"),
    ({"streams": ()}, "profile.streams must name at least one"),
    ({"streams": (0,)}, r"profile.streams must be integers in 1\.\.1024"),
    ({"streams": (1, 2000)}, "profile.streams"),
    ({"streams": (1, 1)}, "profile.streams has duplicates"),
    ({"stripe_bytes": 1000}, "profile.stripe_bytes must be a multiple of 4096"),
    ({"stripe_bytes": 0}, "profile.stripe_bytes"),
    ({"stripe_bytes": 2 << 30}, "profile.stripe_bytes"),
    ({"repeat": 0}, "profile.repeat must be in 1..100"),
    ({"checksum": "md5"}, "profile.checksum must be one of"),
    ({"device": "tpu"}, "profile.device must be auto, cpu or cuda"),
])
def test_config_rejects(tmp_path: Path, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(tmp_path, **kw)


def test_config_defaults_and_normalises(tmp_path: Path) -> None:
    cfg = ProfileConfig(str(tmp_path), streams=(8, 1, 4))  # type: ignore[arg-type]
    assert cfg.dir == tmp_path and cfg.streams == (1, 4, 8)
    assert cfg.size_bytes == 2 << 30 and cfg.stripe_bytes == 16 << 20
    assert cfg.checksum == "crc32" and cfg.device == "auto" and cfg.repetitions == 3
    assert cfg.to_json()["repeat"] == 3


def test_cuda_asked_without_cuda_is_a_config_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"profile\.device is cuda but CUDA is not available"):
        run_profile(_cfg(tmp_path, device="cuda"))
    assert _leftovers(tmp_path) == []


# --- pre-flight ----------------------------------------------------------------------------------


def test_check_target_bad_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for directory, message in ((tmp_path / "missing", "does not exist"),
                               (afile, "is not a directory"),
                               (afile / "sub", "part of the path is a file")):
        with pytest.raises(CheckpointError, match=message):
            check_target(_cfg(directory))
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(CheckpointError, match="is not writable"):
        check_target(_cfg(tmp_path))


def test_check_target_space_and_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CheckpointError, match=r"not enough free space .* needs 1\.10 PiB"):
        check_target(_cfg(tmp_path, size_bytes=1 << 50))
    monkeypatch.setattr(profile_mod, "mem_available", lambda: 64 * MiB)
    with pytest.raises(CheckpointError, match=r"not enough memory: .* 64\.0 MiB available"):
        check_target(_cfg(tmp_path))
    monkeypatch.setattr(profile_mod, "mem_available", lambda: None)  # no /proc/meminfo
    check_target(_cfg(tmp_path))
    assert _leftovers(tmp_path) == []


def test_space_and_memory_needed() -> None:
    size = 8 << 30
    assert stream_bytes(size) <= space_needed(size) <= int(1.1 * stream_bytes(size)) + 64 * MiB
    assert memory_needed(size) == 3 * stream_bytes(size) + 256 * MiB


def test_too_large_fails_before_anything_is_written(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def no_source(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the state must not be generated")

    monkeypatch.setattr(profile_mod, "Source", no_source)
    with pytest.raises(CheckpointError, match="not enough free space"):
        run_profile(_cfg(tmp_path, size_bytes=1 << 50))
    assert _leftovers(tmp_path) == []


def test_unwritable_directory_fails_before_generating(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As root permission bits do not stop writes, so the scratch directory and a probe page
    are really written (here: a read-only filesystem refusing the fsync)."""
    def no_source(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the state must not be generated")

    def read_only(fd: int) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(profile_mod, "Source", no_source)
    monkeypatch.setattr(os, "fsync", read_only)
    with pytest.raises(CheckpointError, match=r"cannot write to --dir .*Read-only file system"):
        run_profile(_cfg(tmp_path))
    assert _leftovers(tmp_path) == []


# --- the profile ---------------------------------------------------------------------------------


def test_every_stream_count_has_every_stage(profiled: tuple[ProfileResult, Path]) -> None:
    result, _ = profiled
    assert result.device == "cpu" and result.n_tensors > 0
    assert result.nbytes == stream_bytes(SIZE)
    assert [s.streams for s in result.streams] == list(STREAMS)
    assert [s.files for s in result.streams] == [1, 2, 4]
    for s in result.streams:
        assert s.d2h is None and s.copy is not None  # a CPU state: no device-to-host copy
        for name in STAGES:
            timing = s.stage(name)
            if name == "d2h":
                continue
            assert timing is not None, name
            assert len(timing.samples_s) == 2 and all(t >= 0 for t in timing.samples_s), name
            assert timing.nbytes == result.nbytes
        for name in ("blocking", "write", "save", "read", "load"):
            timing = s.stage(name)
            assert timing is not None and timing.median_s > 0 and timing.gbps, name


def test_baselines_present(profiled: tuple[ProfileResult, Path]) -> None:
    result, _ = profiled
    expected = BASELINES | ({"direct_total", "direct_read"} if result.direct_io else set())
    assert set(result.baselines) == expected
    assert all(t.median_s > 0 for t in result.baselines.values())
    keys = {c.baseline for c in result.comparisons()}
    assert {"torch_total", "torch_load", "raw_total", "raw_read"} <= keys


def test_best_configuration_follows_the_numbers(profiled: tuple[ProfileResult, Path]) -> None:
    result, _ = profiled
    save_gbps = {s.streams: s.save.gbps or 0.0 for s in result.streams}
    load_gbps = {s.streams: s.load.gbps or 0.0 for s in result.streams}
    assert save_gbps[result.best_save.streams] == max(save_gbps.values())
    assert load_gbps[result.best_load.streams] == max(load_gbps.values())
    assert result.recommendation() == (
        f"Checkpointer(streams={result.best_save.streams}, stripe_bytes=256 << 10)")
    save, load = result.breakdowns()
    assert save.streams == result.best_save.streams and load.streams == result.best_load.streams
    assert save.total_s == result.best_save.save.median_s
    assert {n for n, _ in save.stages} == {"serialize", "copy", "checksum", "write", "fsync"}
    assert {n for n, _ in load.stages} == {"allocate", "read", "verify"}
    assert math.isclose(sum(f for _, _, f in save.shares()), 1.0)


def test_json_round_trip(profiled: tuple[ProfileResult, Path]) -> None:
    result, _ = profiled
    doc = result.to_json()
    again = json.loads(json.dumps(doc, allow_nan=False))
    assert again == doc
    assert again["config"]["streams"] == list(STREAMS) and again["nbytes"] == result.nbytes
    assert again["best"] == {
        "save_streams": result.best_save.streams,
        "save_gbps": round(result.best_save.save.gbps or 0.0, 4),
        "load_streams": result.best_load.streams,
        "load_gbps": round(result.best_load.load.gbps or 0.0, 4),
        "recommendation": result.recommendation()}
    for entry, s in zip(again["streams"], result.streams, strict=True):
        assert entry["streams"] == s.streams and set(entry["stages"]) == set(STAGES)
        assert entry["stages"]["d2h"] is None
        assert entry["stages"]["save"]["samples_s"] == [round(t, 6) for t in s.save.samples_s]
    assert set(again["baselines"]) == set(result.baselines)
    for c in again["comparisons"]:
        assert c["ratio"] >= 1 and c["verdict"] in ("faster", "slower", "on par")
        assert math.isclose(c["speedup"], c["baseline_s"] / c["engine_s"], rel_tol=1e-2)
    assert [b["operation"] for b in again["where_the_time_goes"]] == ["save", "load"]


def test_nothing_left_behind(profiled: tuple[ProfileResult, Path]) -> None:
    _, directory = profiled
    assert _leftovers(directory) == []


def test_peak_disk_use_is_one_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every method drops the cache of what it just wrote and fsynced: the moment its files
    are all on disk. The bytes under the scratch directory then stay within one copy (plus
    block rounding and metadata), which is what `space_needed` asks for."""
    peak = [0]
    drop = profile_io.drop_cache

    def measuring(path: Path) -> bool:
        used = sum(os.stat(os.path.join(d, f)).st_blocks * 512
                   for d, _, files in os.walk(tmp_path) for f in files)
        peak[0] = max(peak[0], used)
        return drop(path)

    monkeypatch.setattr(profile_mod, "drop_cache", measuring)
    monkeypatch.setattr(profile_io, "drop_cache", measuring)
    result = run_profile(_cfg(tmp_path, repeat=1))
    assert result.nbytes <= peak[0] <= int(1.1 * result.nbytes) + MiB
    assert peak[0] <= space_needed(SIZE)


def test_cpu_state_never_touches_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``device="auto"`` on a host without CUDA: the CPU path; no CUDA call beyond asking
    whether it is there (the engine asks too), no D2H timing."""
    def cuda_used(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("CUDA used on the CPU path")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("synchronize", "current_device", "mem_get_info", "init"):
        monkeypatch.setattr(torch.cuda, name, cuda_used)
    result = run_profile(_cfg(tmp_path, device="auto", streams=(2,), repeat=1))
    assert result.device == "cpu"
    assert all(s.d2h is None and s.copy is not None for s in result.streams)


def _refuse_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem that refuses O_DIRECT at open (tmpfs before Linux 6.6, some FUSE mounts)."""
    real_open = os.open

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


def test_filesystem_without_o_direct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _refuse_direct(monkeypatch)
    assert probe_direct(tmp_path) is False
    result = run_profile(_cfg(tmp_path, streams=(1, 2), repeat=1))
    assert result.direct_io is False
    assert set(result.baselines) == BASELINES  # no direct_* baselines: reported as unsupported
    assert not any(c.baseline.startswith("direct") for c in result.comparisons())
    assert _leftovers(tmp_path) == []


def test_direct_io_probe_on_tmpfs(tmp_path: Path) -> None:
    """A real tmpfs, where there is one: whichever answer the kernel gives, no crash."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    probe_dir = shm / f"{WORK_PREFIX}test-{os.getpid()}"
    probe_dir.mkdir()
    try:
        assert probe_direct(probe_dir) in (True, False)
        assert list(probe_dir.iterdir()) == []
    finally:
        probe_dir.rmdir()


# --- cleanup on failure --------------------------------------------------------------------------


def test_failing_stage_is_one_error_and_cleans_up(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(profile_mod, "striped_pass", broken)
    with pytest.raises(CheckpointError, match=r"profile failed in .*Input/output error"):
        run_profile(_cfg(tmp_path, repeat=1))
    assert _leftovers(tmp_path) == []


def test_ctrl_c_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the middle (after the engine and per-stage files were written) propagates
    and leaves nothing."""
    def interrupted(self: Any) -> dict[str, float]:
        assert any(self.work.iterdir())  # the engine's checkpoint directory is there
        raise KeyboardInterrupt

    monkeypatch.setattr(profile_mod._Run, "_torch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_profile(_cfg(tmp_path, streams=(1,), repeat=1))
    assert _leftovers(tmp_path) == []


def test_out_of_memory_while_generating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(*args: Any, **kwargs: Any) -> None:
        raise MemoryError

    monkeypatch.setattr(profile_mod, "Source", no_memory)
    with pytest.raises(CheckpointError, match="ran out of memory"):
        run_profile(_cfg(tmp_path))
    assert _leftovers(tmp_path) == []


def test_leftovers_of_a_killed_profile_are_named_not_removed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old = tmp_path / f"{WORK_PREFIX}1-deadbeef"
    old.mkdir()
    run_profile(_cfg(tmp_path, streams=(1,), repeat=1))
    assert _leftovers(tmp_path) == [old.name]
    assert old.name in caplog.text and "did not finish" in caplog.text


# --- comparisons ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("engine_s", "baseline_s", "summary", "verdict", "ratio"), [
    (1.0, 0.85, "load 1.18x slower", "slower", 1 / 0.85),
    (1.0, 1.3, "load 1.30x faster", "faster", 1.3),
    (2.0, 1.0, "load 2.00x slower", "slower", 2.0),
    (1.0, 1.002, "load on par", "on par", 1.002),
    (1.0, 1.0, "load on par", "on par", 1.0),
])
def test_comparison_wording(engine_s: float, baseline_s: float, summary: str, verdict: str,
                            ratio: float) -> None:
    c = Comparison("load vs torch.load", "torch_load", engine_s, baseline_s)
    assert c.summary() == summary and c.verdict == verdict
    assert math.isclose(c.ratio, ratio) and c.ratio >= 1
    assert math.isclose(c.speedup, baseline_s / engine_s)
    doc = c.to_json()
    assert doc["operation"] == "load" and doc["summary"] == summary
    assert doc["speedup"] == round(baseline_s / engine_s, 4)


def test_comparison_of_a_zero_time_is_valid_json() -> None:
    doc = Comparison("save vs x", "raw_total", 0.0, 1.0).to_json()
    assert doc["speedup"] is None and doc["ratio"] is None
    json.dumps(doc, allow_nan=False)
