"""FileTail: complete lines only, line numbers, truncation and replacement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainguard.filetail import FileTail, parse_json_lines


def test_complete_lines_only_with_numbers(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_bytes(b"a\nb\npart")
    t = FileTail(p)
    assert t.read() == (b"a\nb\n", 1)
    with open(p, "ab") as f:
        f.write(b"ial\nc\n")
    assert t.read() == (b"partial\nc\n", 3)
    assert t.read() == (b"", 5)


def test_from_end_skips_history_including_a_half_line(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_bytes(b"old 1\nold 2\nhalf")
    t = FileTail(p, from_end=True)
    with open(p, "ab") as f:
        f.write(b" line\nnew\n")
    assert t.read() == (b"new\n", 4)


def test_missing_file_then_created(tmp_path: Path) -> None:
    p = tmp_path / "later.log"
    t = FileTail(p, from_end=True)
    assert t.read() == (b"", 1)
    p.write_bytes(b"x\n")
    assert t.read() == (b"x\n", 1)


def test_truncation_and_replacement_restart(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_bytes(b"1\n2\n3\n")
    t = FileTail(p)
    t.read()
    p.write_bytes(b"new\n")  # truncated (echo > file)
    assert t.read() == (b"new\n", 1)
    q = tmp_path / "rotated"
    q.write_bytes(b"r1\nr2\n")
    os.replace(q, p)  # replaced (rotation), same size class
    assert t.read() == (b"r1\nr2\n", 1)


def test_json_lines_skip_garbage() -> None:
    data = b'{"kind":"step","step":1}\nnot json\n[1,2]\n\n{"kind":"finish"}\n'
    assert [r["kind"] for r in parse_json_lines(data, "x")] == ["step", "finish"]


@pytest.mark.parametrize(("max_bytes", "max_lines", "first", "kept"), [
    (1 << 20, 1000, 1, 100),   # everything
    (1 << 20, 10, 91, 10),     # the last 10 lines, numbered as in the file
    (55, 1000, 96, 5),         # the byte bound: a line cut by it is left out
    (1 << 20, 0, 101, 0),
])
def test_read_tail_is_bounded_in_bytes_and_lines_and_keeps_line_numbers(
        tmp_path: Path, max_bytes: int, max_lines: int, first: int, kept: int) -> None:
    from trainguard.filetail import read_tail

    path = tmp_path / "out.log"
    path.write_bytes(b"".join(b"line %03d x\n" % i for i in range(1, 101)))  # 11 bytes each
    data, first_line = read_tail(path, max_bytes, max_lines)
    lines = data.decode().splitlines()
    assert (first_line, len(lines)) == (first, kept)
    if lines:
        assert lines[0] == f"line {first:03d} x" and lines[-1] == "line 100 x"
