"""The storage probe for real on tmp_path, its skips, its budget, and that it cleans up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import trainguard.check.probes_storage as st
from trainguard.check.model import Status
from trainguard.check.probe_base import Deadline, ProbeParams


def _params(d: Path | None, **kw: object) -> ProbeParams:
    return ProbeParams("s1", checkpoint_dir=d, storage_bytes=16 * 2**20, **kw)  # type: ignore[arg-type]


def test_storage_measures_write_and_read_and_removes_its_file(tmp_path: Path) -> None:
    r = st.storage(_params(tmp_path))
    assert r.status is Status.OK, r.reason
    for name in ("write_mbps", "read_mbps"):
        fig = r.figure(name)
        assert fig is not None and fig.value > 0 and fig.unit == "MB/s"
    facts = dict(r.facts)
    assert facts["bytes_written"] == facts["bytes_read"] == str(16 * 2**20)
    assert facts["read_mode"] in ("O_DIRECT", "posix_fadvise(DONTNEED)")
    assert list(tmp_path.iterdir()) == []


def test_the_file_is_removed_when_writing_fails(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(st.os, "fsync", broken_fsync)
    r = st.storage(_params(tmp_path))
    assert r.status is Status.ERROR and "Input/output error" in r.reason
    assert list(tmp_path.iterdir()) == []


def test_skipped_only_without_a_dir_and_failed_with_an_unusable_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert st.storage(_params(None)).status is Status.SKIPPED
    missing = st.storage(_params(tmp_path / "nope"))
    assert missing.status is Status.ERROR and "does not exist" in missing.reason
    (tmp_path / "f").write_text("x")
    not_dir = st.storage(_params(tmp_path / "f"))
    assert not_dir.status is Status.ERROR and "not a directory" in not_dir.reason
    monkeypatch.setattr(st.os, "access", lambda path, mode: False)  # root passes access()
    unwritable = st.storage(_params(tmp_path))
    assert unwritable.status is Status.ERROR and "not writable" in unwritable.reason


def test_a_nearly_full_dir_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Usage:
        free = st.MIN_FREE - 1
    monkeypatch.setattr(st.shutil, "disk_usage", lambda path: Usage)
    r = st.storage(_params(tmp_path))
    assert r.status is Status.ERROR and "is full" in r.reason


def test_size_is_bounded_by_a_quarter_of_the_free_space(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    class Usage:
        free = 40 * 2**20
    monkeypatch.setattr(st.shutil, "disk_usage", lambda path: Usage)
    assert st.storage_size(tmp_path, 128 * 2**20) == 8 * 2**20


def test_writing_stops_at_the_budget_after_a_synced_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A throttled dir gives a low figure within the budget instead of a timeout."""
    now = [0.0]
    syncs: list[int] = []
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # each fsync "takes" 10 s on the injected clock
        syncs.append(fd)
        now[0] += 10.0
        real_fsync(fd)
    monkeypatch.setattr(st.os, "fsync", slow_fsync)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        written, _ = st.write_synced(fd, 128 * 2**20, Deadline(5.0, clock=lambda: now[0]))
    finally:
        os.close(fd)
    assert written == st.SYNC_EVERY  # one synced block, then the budget stopped it
    assert len(syncs) == 2
