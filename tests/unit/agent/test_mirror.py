"""The controller's append descriptors for agents' rank output (trainguard.agent.mirror)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from trainguard.agent import mirror
from trainguard.agent.mirror import AppendFiles


def _counting_open(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real = os.open

    def counting(path: object, flags: int, mode: int = 0o777) -> int:
        opened.append(str(path))
        return real(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(mirror.os, "open", counting)
    return opened


def test_many_pieces_to_one_file_open_it_once(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _counting_open(monkeypatch)
    files = AppendFiles()
    for i in range(100):
        assert files.append(tmp_path / "out", f"{i}\n".encode())
    # a reader sees every piece at once, without a flush or a close
    assert (tmp_path / "out").read_text().splitlines() == [str(i) for i in range(100)]
    assert len(opened) == 1
    files.close()
    assert len(files) == 0


def test_the_least_recently_used_file_is_closed_beyond_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _counting_open(monkeypatch)
    files = AppendFiles(cap=2)
    for name in ("a", "b", "a", "c", "a", "b"):
        files.append(tmp_path / name, name.encode())
    assert len(files) == 2
    assert [Path(p).name for p in opened] == ["a", "b", "c", "b"]  # b went out for c
    assert (tmp_path / "a").read_bytes() == b"aaa"
    files.close()


def test_out_of_descriptors_evicts_retries_then_drops_with_one_log_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    files = AppendFiles(cap=8)
    for name in "abcd":
        files.append(tmp_path / name, b"x")
    real = os.open
    fail = {"n": 1}

    def emfile(path: object, flags: int, mode: int = 0o777) -> int:
        if fail["n"] > 0:
            fail["n"] -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(mirror.os, "open", emfile)
    assert files.append(tmp_path / "e", b"e")  # evicted some, the retry worked
    assert len(files) < 5
    fail["n"] = 10 ** 6
    with caplog.at_level(logging.WARNING, logger=mirror.__name__):
        for _ in range(50):
            assert not files.append(tmp_path / "f", b"f")
    assert files.dropped == 50
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
    files.close()


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"mirror\.cap"):
        AppendFiles(cap=0)

