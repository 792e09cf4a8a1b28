"""A named checkpoint dir that does not work fails its host (issue 26, section 4): real mounts
(a full tmpfs, a read-only tmpfs, a read-only bind mount), a missing dir; and the read figure is
not the page cache's."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import trainguard.check.probes_storage as st
from trainguard.check.judge import judge, summarize
from trainguard.check.model import Level, Status
from trainguard.check.probe_base import ProbeParams


def _params(d: Path) -> ProbeParams:
    return ProbeParams("s1", checkpoint_dir=d, storage_bytes=16 * 2**20, time_limit_s=10)


@contextlib.contextmanager
def mounted(target: Path, *args: str) -> Iterator[Path]:
    """``mount ARGS target`` for the length of the block (unmounted in a finally)."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    target.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount here: {r.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _fill(directory: Path) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):  # until ENOSPC
            while True:
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)


def _fails(directory: Path, *words: str) -> None:
    r = st.storage(_params(directory))
    assert r.status is Status.ERROR, r
    assert all(w in r.reason for w in words), r.reason
    [finding] = judge([r])
    assert finding.level is Level.FAIL and summarize([finding]) == {"s1": Level.FAIL}


def test_a_full_tmpfs_fails(tmp_path: Path) -> None:
    with mounted(tmp_path / "ckpt", "-t", "tmpfs", "-o", "size=64k", "tmpfs") as d:
        _fill(d)
        _fails(d, "ENOSPC")
        assert [p.name for p in d.iterdir()] == ["filler"]  # the probe file is gone


def test_a_read_only_tmpfs_fails(tmp_path: Path) -> None:
    with mounted(tmp_path / "ckpt", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs") as d:
        _fails(d, "EROFS")


def test_a_read_only_bind_mount_fails(tmp_path: Path) -> None:
    src = tmp_path / "real"
    src.mkdir()
    with mounted(tmp_path / "ckpt", "--bind", "-o", "ro", str(src)) as d:
        if os.access(d, os.W_OK):  # older mount(8): a second remount makes it read-only
            subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)
        _fails(d, "EROFS")


def test_a_missing_dir_and_a_file_fail(tmp_path: Path) -> None:
    _fails(tmp_path / "nope", "does not exist")
    (tmp_path / "file").write_text("x")
    _fails(tmp_path / "file", "not a directory")


def test_a_small_but_working_tmpfs_is_full_for_a_checkpoint(tmp_path: Path) -> None:
    with mounted(tmp_path / "ckpt", "-t", "tmpfs", "-o", "size=1m", "tmpfs") as d:
        _fails(d, "is full")


def test_on_tmpfs_the_read_is_memory_and_not_compared(tmp_path: Path) -> None:
    with mounted(tmp_path / "ckpt", "-t", "tmpfs", "-o", "size=256m", "tmpfs") as d:
        r = st.storage(_params(d))
    assert r.status is Status.OK, r.reason
    assert r.figure("read_mbps") is None  # memory speed is no storage figure
    facts = dict(r.facts)
    assert facts["read_mode"].startswith("memory (tmpfs")
    assert float(facts["read_mbps_from_memory"]) > 0
    assert r.figures == () and float(facts["write_mbps_to_memory"]) > 0  # the dir works


def test_on_a_disk_the_read_is_uncached_with_its_spread(tmp_path: Path) -> None:
    if st.filesystem_type(tmp_path) in st.MEMORY_FILESYSTEMS:
        pytest.skip("tmp_path is on a memory filesystem here")
    r = st.storage(_params(tmp_path))
    assert r.status is Status.OK, r.reason
    read = r.figure("read_mbps")
    assert read is not None and read.value > 0 and 0.0 <= read.spread < 1.0
    facts = dict(r.facts)
    assert facts["read_mode"] in ("O_DIRECT", "posix_fadvise(DONTNEED)"), facts
    assert int(facts["read_passes"]) == st.READ_PASSES


def test_the_page_cache_is_seen_after_dontneed_fails(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Where DONTNEED leaves the pages cached (and O_DIRECT is refused), the read is not
    reported as the storage's."""
    monkeypatch.setattr(st, "_open_direct", lambda path: None)
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, advice: None)
    r = st.storage(_params(tmp_path))
    assert r.status is Status.OK, r.reason
    if st.filesystem_type(tmp_path) not in st.MEMORY_FILESYSTEMS:
        assert dict(r.facts)["read_mode"].startswith("page cache"), r.facts
    assert r.figure("read_mbps") is None
