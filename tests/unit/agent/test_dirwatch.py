"""DirWatch (inotify on the agent's work directory) and StatTail (a tail read only when stat
says the file grew or was replaced): what an agent's look at its ranks' files relies on."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from trainguard.agent.dirwatch import DirWatch, parse_events
from trainguard.agent.host import StatTail


def _event(mask: int, name: bytes) -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(padded)) + padded


@pytest.mark.parametrize(("data", "names", "lost"), [
    (b"", set(), False),
    (_event(0x002, b"rank0.log"), {"rank0.log"}, False),
    (_event(0x002, b"rank0.log") + _event(0x100, b"rank1.events.jsonl")
     + _event(0x002, b"rank0.log"), {"rank0.log", "rank1.events.jsonl"}, False),
    (_event(0x4000, b""), set(), True),             # queue overflow: anything may have changed
    (_event(0x8000, b""), set(), True),             # the watch went away
])
def test_parse_events(data: bytes, names: set[str], lost: bool) -> None:
    assert parse_events(data) == (names, lost)


@pytest.fixture
def watch(tmp_path: Path) -> DirWatch:
    w = DirWatch.open(tmp_path)
    if w is None:
        pytest.skip("inotify is not available here")
    return w


def test_dirwatch_names_the_files_written_since_the_last_look(
        tmp_path: Path, watch: DirWatch) -> None:
    try:
        assert watch.changed() == set()
        (tmp_path / "rank0.log").write_bytes(b"a\n")
        with open(tmp_path / "rank1.events.jsonl", "ab") as f:
            f.write(b"{}\n")
        assert watch.changed() == {"rank0.log", "rank1.events.jsonl"}
        assert watch.changed() == set()
        with open(tmp_path / "rank0.log", "ab") as f:
            f.write(b"b\n")
        assert watch.changed() == {"rank0.log"}
    finally:
        watch.close()
    assert watch.changed() is None  # closed: unknown, so callers look at everything


def test_dirwatch_of_a_missing_directory_is_none(tmp_path: Path) -> None:
    assert DirWatch.open(tmp_path / "nope") is None


def test_stat_tail_reads_new_lines_only_and_follows_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    tail = StatTail(path)
    assert tail.read(1 << 20) == (b"", False)  # not there yet
    path.write_bytes(b"one\ntw")
    assert tail.read(1 << 20) == (b"one\n", False)
    assert tail.read(1 << 20) == (b"", False)
    with open(path, "ab") as f:
        f.write(b"o\n")
    assert tail.read(1 << 20) == (b"two\n", False)
    # Replaced by a file of the very size already read: only the inode tells.
    other = tmp_path / "new"
    other.write_bytes(b"abc\ndef\n")
    os.replace(other, path)
    assert tail.read(1 << 20) == (b"abc\ndef\n", False)


def test_stat_tail_says_when_a_read_stopped_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * 99 + b"\n" + b"y" * 99 + b"\n")
    tail = StatTail(path)
    data, more = tail.read(100)
    assert (data, more) == (b"x" * 99 + b"\n", True)
    assert tail.read(100) == (b"y" * 99 + b"\n", True)
    assert tail.read(100) == (b"", False)
