"""FileTail: complete lines only, line numbers, truncation and replacement."""

from __future__ import annotations

import os
from pathlib import Path

from trainguard.recover.tail import FileTail, parse_json_lines


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
