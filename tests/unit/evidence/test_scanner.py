"""Scanning files: bad input never raises, multi-line reports survive chunk boundaries.

Requirement: binary files, invalid UTF-8, a 10 MB single line, empty files and unreadable paths
are skipped or truncated with a warning naming the file, never a traceback.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from trainguard.evidence import (
    FailureEvent,
    ScanOptions,
    ScanWarning,
    inputs,
    load_rules,
    scan_paths,
    scanner,
)
from trainguard.evidence.scanner import host_from_path
from trainguard.taxonomy import Category

XID = ("May  1 10:00:00 node2 kernel: [812345.678901] NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, "
       "name=python, GPU has fallen off the bus.")
TEN_MB = 10 << 20

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 212, in <module>',
    "    main()",
    '  File "/workspace/data.py", line 57, in collate',
    '    raise ValueError(f"expected {n} tokens per sample, got {len(s)}")',
    "ValueError: expected 2048 tokens per sample, got 2047",
]
CHILD_FAILED = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2024-05-01_10:00:00",
    "  host      : node17",
    "  rank      : 13 (local_rank: 5)",
    "  exitcode  : 1 (pid: 48211)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
]


def _scan(*paths: Path | str, options: ScanOptions | None = None
          ) -> tuple[list[FailureEvent], list[ScanWarning]]:
    events, stats = scan_paths([str(p) for p in paths], load_rules(), options or ScanOptions())
    return events, stats.warnings


def _filler(n_bytes: int) -> list[str]:
    """Harmless log lines totalling exactly ``n_bytes`` (newlines included)."""
    line = "[2024-05-01 10:00:00,000] [INFO] [trainer] step 1200 | lr 2.9e-04 | tok/s 51234 "
    line = line.ljust(99, ".")
    lines = [line] * (n_bytes // 100)
    rest = n_bytes - 100 * len(lines)
    if rest:
        lines.append("." * (rest - 1))
    return lines


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


# --- bad input: a warning naming the file, never an exception ----------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("core.dump", b"\x7fELF\x02\x01\x01\x00\x00\x00" + XID.encode(), "binary"),
        ("model.pt", b"PK\x03\x04\x00\x00\x08\x00" + b"\x00" * 64, "binary"),
        ("empty.log", b"", "empty"),
    ],
)
def test_unusable_file_gives_a_warning_naming_it(tmp_path: Path, name: str, content: bytes,
                                                 message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)

    events, warnings = _scan(path)

    assert events == []
    assert len(warnings) == 1
    assert warnings[0].path == str(path)
    assert message in warnings[0].message


def test_invalid_utf8_is_decoded_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_bytes(b"\xff\xfe\xfa garbage\n" + XID.encode().replace(b"python", b"py\xffthon")
                     + b"\n")

    events, warnings = _scan(path)

    assert [(e.xid, e.evidence[0].line_no) for e in events] == [(79, 2)]
    assert [w.path for w in warnings] == [str(path)]
    assert "UTF-8" in warnings[0].message


def test_missing_path_gives_a_warning(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    events, warnings = _scan(missing)
    assert events == []
    assert warnings == [ScanWarning(str(missing), "no such file or directory")]


def test_unreadable_file_gives_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret.log"
    secret.write_text(XID + "\n")
    secret.chmod(0)
    if os.geteuid() == 0:  # root reads mode-000 files: make open() fail as it would for a user

        real_open = open

        def denied(path: str, *args: Any, **kwargs: Any) -> Any:
            if path == str(secret):
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(inputs, "open", denied, raising=False)
    readable = _write_lines(tmp_path / "ok.log", [XID])

    events, stats = scan_paths([str(secret), str(readable)], load_rules())

    assert [e.evidence[0].path for e in events] == [str(readable)]
    assert [w.path for w in stats.warnings] == [str(secret)]
    assert "Permission denied" in stats.warnings[0].message
    assert (stats.files_read, stats.files_skipped) == (1, 1)


def test_ten_megabyte_line_is_truncated_and_later_lines_keep_their_numbers(
        tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    with path.open("wb") as f:
        f.write(b"[rank0]: step 1 " + b"A" * TEN_MB + b"\n")
        f.write(b"[rank0]: step 2\n")
        f.write(XID.encode() + b"\n")

    events, warnings = _scan(path)

    assert [(e.xid, e.evidence[0].line_no) for e in events] == [(79, 3)]
    assert [w.path for w in warnings] == [str(path)]
    assert "longer than" in warnings[0].message


def test_ten_megabyte_line_with_a_match_in_its_head(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    with path.open("wb") as f:
        f.write(b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered "
                + b"x" * TEN_MB + b"\n")
        f.write(XID.encode() + b"\n")

    events, warnings = _scan(path)

    assert [(e.signature, e.evidence[0].line_no) for e in events] == [
        ("cuda_illegal_address", 1), ("xid", 2)]
    assert all(len(e.evidence[0].text) <= 2000 for e in events)
    assert [w.path for w in warnings] == [str(path)]


def test_ten_megabyte_file_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "blob.txt"
    path.write_bytes(b"A" * TEN_MB)
    events, warnings = _scan(path)
    assert events == []
    assert [w.path for w in warnings] == [str(path)]


def test_line_count_includes_overlong_lines(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"A" * TEN_MB + b"\nstep 2\nstep 3\n")
    _, stats = scan_paths([str(path)], load_rules())
    assert stats.lines_read == 3


# --- multi-line blocks across chunk boundaries -------------------------------------------------


def _assert_block_parsed(events: list[FailureEvent], first_block_line: int) -> None:
    by_sig = {e.signature: e for e in events}
    exc = by_sig["python_exception"]
    assert exc.field_value("exc_type") == "ValueError"
    assert exc.field_value("last_frame") == "/workspace/data.py:57 in collate"
    assert [ev.line_no for ev in exc.evidence] == [first_block_line, first_block_line + 5]
    child = by_sig["elastic_child_failed"]
    assert (child.host, child.rank, child.field_value("exit_code")) == ("node17", 13, "1")
    assert child.category is Category.USER_CODE_ERROR  # exit code 1 hints at the user's code
    assert child.evidence[0].line_no == first_block_line + len(TRACEBACK) + 7
    assert len(events) == 3  # + the ChildFailedError line itself


@pytest.mark.parametrize("offset", range(2600, 4700, 150))
def test_block_straddling_a_chunk_boundary_is_parsed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offset: int) -> None:
    # Small chunks keep the test fast; the block (about 1.3 KB) starts at `offset`, so over the
    # parameter range it begins before, across and after the first chunk's cut point.
    monkeypatch.setattr(scanner, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(scanner, "LOOKAHEAD_BYTES", 1024)
    filler = _filler(offset)
    path = _write_lines(tmp_path / "launcher.log", [*filler, *TRACEBACK, *CHILD_FAILED])

    events, warnings = _scan(path)

    assert warnings == []
    _assert_block_parsed(events, len(filler) + 1)


def test_block_straddling_the_default_4_mib_chunk_boundary(tmp_path: Path) -> None:
    filler = _filler(scanner.CHUNK_BYTES - scanner.LOOKAHEAD_BYTES - 300)
    path = _write_lines(tmp_path / "launcher.log",
                        [*filler, *TRACEBACK, *CHILD_FAILED, *_filler(scanner.CHUNK_BYTES)])

    events, warnings = _scan(path)

    assert warnings == []
    _assert_block_parsed(events, len(filler) + 1)


def test_many_events_across_many_small_chunks_keep_their_line_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scanner, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(scanner, "LOOKAHEAD_BYTES", 1024)
    lines: list[str] = []
    expected: list[int] = []
    for i in range(40):
        lines.extend(_filler(100 * (i % 7 + 1)))
        lines.append(XID.replace("pid=48211", f"pid={i}"))
        expected.append(len(lines))

    events, _ = _scan(_write_lines(tmp_path / "kern.log", lines))

    assert [e.evidence[0].line_no for e in events] == expected
    assert [e.field_value("pid") for e in events] == [str(i) for i in range(40)]


@pytest.mark.parametrize("prefix", ["", "[rank0]: ", "[default0]:"])
def test_traceback_reads_to_its_exception_line(tmp_path: Path, prefix: str) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 212, in <module>',
        "    main()",
        '  File "/workspace/data.py", line 57, in collate',
        "    raise",
        "ValueError: expected 2048 tokens per sample, got 2047",
    ]
    path = _write_lines(tmp_path / "rank0.log", [prefix + line for line in lines])

    events, _ = _scan(path)

    assert [e.field_value("exc_type") for e in events] == ["ValueError"]
    assert events[0].field_value("last_frame") == "/workspace/data.py:57 in collate"
    assert [ev.line_no for ev in events[0].evidence] == [1, 6]


def test_interleaved_rank_output_does_not_end_another_ranks_traceback(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "all.log", [
        "[rank0]:Traceback (most recent call last):",
        '[rank1]:[W501 10:00:00.000000 4001 ProcessGroupNCCL.cpp:1200] Warning: still waiting',
        '[rank0]:  File "/workspace/train.py", line 212, in <module>',
        "[rank0]:    main()",
        "[rank1]:KeyboardInterrupt",
        "[rank0]:ValueError: expected 2048 tokens per sample, got 2047",
    ])

    events, _ = _scan(path)

    tb = next(e for e in events if e.evidence[0].line_no == 1)
    assert tb.field_value("exc_type") == "ValueError"
    assert tb.rank == 0


# --- input kinds -------------------------------------------------------------------------------


def test_gzip_input(tmp_path: Path) -> None:
    path = tmp_path / "kern.log.1.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("May  1 09:59:00 node2 kernel: eth0: link up\n" + XID + "\n")

    events, warnings = _scan(path)

    assert warnings == []
    assert [(e.xid, e.evidence[0].line_no, e.host) for e in events] == [(79, 2, "node2")]


def test_truncated_gzip_gives_a_warning_not_a_crash(tmp_path: Path) -> None:
    data = gzip.compress("".join(f"{XID.replace('48211', str(i))}\n" for i in range(4000))
                         .encode())
    path = tmp_path / "kern.log.2.gz"
    path.write_bytes(data[: len(data) // 2])

    _, warnings = _scan(path)

    assert [w.path for w in warnings] == [str(path)]
    assert "skipped" in warnings[0].message


def test_truncated_gzip_still_yields_the_intact_part(tmp_path: Path) -> None:
    # A node that crashed while logrotate compressed its log leaves a truncated .gz; the
    # readable part (here about half the lines) is exactly the evidence wanted.
    data = gzip.compress("".join(f"{XID.replace('48211', str(i))}\n" for i in range(4000))
                         .encode())
    path = tmp_path / "kern.log.2.gz"
    path.write_bytes(data[: len(data) // 2])

    events, _ = _scan(path)

    assert len(events) > 100
    assert events[0].field_value("pid") == "0"


def test_not_really_gzip_despite_the_name(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "kern.log.gz", [XID])
    events, warnings = _scan(path)
    assert [e.xid for e in events] == [79]
    assert warnings == []


def test_directories_are_walked_recursively(tmp_path: Path) -> None:
    (tmp_path / "node0").mkdir()
    _write_lines(tmp_path / "node0" / "kern.log", [XID])
    deep = tmp_path / "job42" / "attempt1" / "node7"
    deep.mkdir(parents=True)
    with gzip.open(deep / "kern.log.1.gz", "wt") as f:
        f.write(XID.replace("node2", "node7") + "\n")
    (tmp_path / "job42" / "empty-dir").mkdir()

    events, warnings = _scan(tmp_path, options=ScanOptions(host_from_path=True))

    assert sorted(Path(e.evidence[0].path).relative_to(tmp_path).as_posix() for e in events) == [
        "job42/attempt1/node7/kern.log.1.gz", "node0/kern.log"]
    assert warnings == []


def test_empty_directory_gives_a_warning(tmp_path: Path) -> None:
    events, warnings = _scan(tmp_path)
    assert events == []
    assert [w.path for w in warnings] == [str(tmp_path)]


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((XID + "\n").encode())))
    events, stats = scan_paths(["-"], load_rules())
    assert [(e.xid, e.evidence[0].path) for e in events] == [(79, "<stdin>")]
    assert stats.files_read == 1


def test_stats_count_what_was_read(tmp_path: Path) -> None:
    a = _write_lines(tmp_path / "a.log", ["hello", XID, "bye"])
    b = _write_lines(tmp_path / "b.log", [XID])
    _, stats = scan_paths([str(a), str(b)], load_rules())
    assert (stats.files_read, stats.files_skipped) == (2, 0)
    assert stats.lines_read == 4
    assert stats.bytes_read == a.stat().st_size + b.stat().st_size
    assert stats.events == 2


# --- host names from paths ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "root", "host"),
    [
        ("node17.log", None, "node17"),
        ("logs/node17.log", None, "node17"),
        ("node17.log.gz", None, "node17"),
        ("node17.log.3", None, "node17"),
        ("node17/kern.log", None, "node17"),
        ("logs/node17/kern.log.1.gz", None, "node17"),
        ("logs/node17/syslog", None, "node17"),
        ("logs/node17/rank3.log", None, "node17"),
        ("logs/node17/slurm-494583.out", None, "node17"),
        ("/var/log/gpu-a100-017/messages", None, "gpu-a100-017"),
        ("kern.log", None, None),
        ("logs/node17/kern.log", "logs", "node17"),
        # A file lying directly in a directory argument: that directory names the collection.
        ("logs/kern.log", "logs", None),
    ],
)
def test_host_from_path(path: str, root: str | None, host: str | None) -> None:
    assert host_from_path(path, root) == host


def test_host_from_path_only_when_lines_carry_none(tmp_path: Path) -> None:
    d = tmp_path / "node17"
    d.mkdir()
    _write_lines(d / "kern.log", [XID, "[rank3]: RuntimeError: CUDA error: an illegal memory "
                                       "access was encountered"])
    events, _ = _scan(d / "kern.log", options=ScanOptions(host_from_path=True))
    assert [e.host for e in events] == ["node2", "node17"]
    events, _ = _scan(d / "kern.log")
    assert [e.host for e in events] == ["node2", None]


def test_tensorflow_1_exception_form_is_read_as_the_exception(tmp_path: Path) -> None:
    # TF 1.x: "<Name>Error (see above for traceback): <message>", the bracket part of the form.
    log = tmp_path / "worker.log"
    log.write_text("INFO:tensorflow:Saving checkpoints for 6 into model.ckpt.\n"
                   "NotFoundError (see above for traceback): model/1/variables/variables_temp_9\n")
    events, _ = scan_paths([str(log)], load_rules(), ScanOptions())
    assert [(e.signature, e.field_value("exc_type"), e.field_value("message")) for e in events] == [
        ("python_exception", "NotFoundError", "model/1/variables/variables_temp_9")]
