"""Hostile or mistaken mountstats input: endless and oversized files, giant lines, escaped mount
paths that reach a shell command, and thousands of mounts sharing one transport."""

from __future__ import annotations

import os
import shlex
import threading
import time
from pathlib import Path

import pytest
from nfs_builder import Conn, Mount, Op, render

from trainguard.errors import TelemetryError
from trainguard.nfs import (
    Attribution,
    Environment,
    cumulative,
    diagnose,
    diff,
    escape_path,
    parse_mountstats,
    shared_transports,
    transport_groups,
    unescape_path,
)
from trainguard.nfs.mountstats import MAX_LINE_CHARS
from trainguard.nfs.source import MAX_MOUNTSTATS_BYTES, read_mountstats

# --- reading: bounded, regular files only ---------------------------------------------------


def test_dev_zero_is_refused_without_reading_it() -> None:
    with pytest.raises(TelemetryError, match=r"cannot read /dev/zero: not a regular file "
                                             r"\(a character device\)"):
        read_mountstats(Path("/dev/zero"))


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match=r"not a regular file \(a directory\)"):
        read_mountstats(tmp_path)


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException | str] = []

    def read() -> None:
        try:
            outcome.append(read_mountstats(fifo))
        except TelemetryError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # blocked in open(): release it so the test run can go on
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
        pytest.fail("reading a FIFO blocked waiting for a writer")
    [result] = outcome
    assert isinstance(result, TelemetryError)
    assert "not a regular file (a FIFO)" in str(result)


def test_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.mountstats"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(TelemetryError, match=r"big.mountstats: larger than"):
        read_mountstats(big, max_bytes=4096)
    assert read_mountstats(big, max_bytes=5000) == "x" * 5000  # at the limit: read whole


def test_the_limit_leaves_room_for_thousands_of_mounts() -> None:
    per_mount = len(render(Mount(vers="4.2"))) - len(render())
    assert 10_000 * per_mount < MAX_MOUNTSTATS_BYTES


def test_a_giant_line_is_refused_by_the_parser() -> None:
    text = render(Mount()) + "device " + "x" * (MAX_LINE_CHARS + 1) + "\n"
    with pytest.raises(TelemetryError, match=r"mountstats:\d+: line of 65,544 characters"):
        parse_mountstats(text)


def test_a_long_device_line_is_matched_in_linear_time() -> None:
    # A lazy ".+? mounted on .+? with fstype" took 12 s on this line (quadratic in the
    # "mounted on" repeats); the kernel escapes whitespace, so each field is one \S+ run.
    line = ("device " + "x mounted on " * 5000)[:MAX_LINE_CHARS]
    start = time.perf_counter()
    with pytest.raises(TelemetryError, match=r"malformed 'device \.\.\. mounted on"):
        parse_mountstats(line + "\n")
    assert time.perf_counter() - start < 2.0


# --- escaped mount paths ----------------------------------------------------------------------

HOSTILE = "/mnt/my data/$(touch pwned)\t`id`"


def test_octal_escapes_are_decoded() -> None:
    assert unescape_path(r"/mnt/a\040b\011c\012d\134e") == "/mnt/a b\tc\nd\\e"
    assert escape_path(HOSTILE) == r"/mnt/my\040data/$(touch\040pwned)\011`id`"
    assert unescape_path(escape_path(HOSTILE)) == HOSTILE
    [m] = parse_mountstats(render(Mount(mountpoint=escape_path(HOSTILE),
                                        device=r"filer:/ex\040port"))).mounts
    assert (m.mountpoint, m.device) == (HOSTILE, "filer:/ex port")


def test_remount_command_quotes_the_decoded_paths() -> None:
    before = Mount(mountpoint=escape_path(HOSTILE), device=r"filer:/ex\040port")
    after = before.after(10, ops={"WRITE": Op.avg(20000, queue=80, rtt=6, kib=1024)},
                         conns=[Conn.avg(20200, inflight=12, backlog=44, max_slots=128)])
    [w] = diff(parse_mountstats(render(before)), parse_mountstats(render(after)), 10.0).windows
    d = diagnose(w, Environment(slot_limit=128, slot_limit_source="flag"))
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "rpc-slots")
    first = d.recommendations[0]
    assert first.command is not None
    # The shell sees each path as one word, with nothing left to expand.
    assert shlex.split(first.command) == ["umount", HOSTILE, "&&", "mount", "-t", "nfs", "-o",
                                          "vers=3,nconnect=8", "filer:/ex port", HOSTILE]
    # /proc/mounts prints the path escaped: the grep pattern is the escaped form, quoted.
    grep = first.why.split("(see `", 1)[1].rsplit("`)", 1)[0]
    assert shlex.split(grep) == ["grep", "-F", f" {escape_path(HOSTILE)} ", "/proc/mounts"]


def test_idle_advice_quotes_the_mount_path() -> None:
    d = diagnose(cumulative(parse_mountstats(render(Mount(mountpoint=escape_path(HOSTILE))))
                            .mounts[0]))
    assert d.attribution is Attribution.IDLE
    [rec] = d.recommendations
    assert rec.command is not None
    assert shlex.split(rec.command)[4] == HOSTILE


# --- many mounts on one transport ---------------------------------------------------------------


def many(n: int) -> str:
    """`n` mounts of one server: identical xprt: lines (the client shares the transport)."""
    return render(*(Mount(mountpoint=f"/mnt/vol{i:05d}", device=f"filer:/vol{i:05d}")
                    for i in range(n)))


def test_transport_groups_and_notes_stay_linear() -> None:
    windows = [cumulative(m) for m in parse_mountstats(many(2000)).mounts]
    [group] = transport_groups(windows)
    assert (group.number, len(group.members)) == (1, 2000)
    assert group.mountpoints[:2] == ("/mnt/vol00000", "/mnt/vol00001")
    noted = shared_transports(windows)
    notes = [n for w in noted for n in w.notes if "shared with" in n]
    assert len(notes) == 2000
    assert max(len(n) for n in notes) < 200
    assert "1999 other mounts of the same server (transport group 1)" in notes[0]


def test_few_sharers_are_named() -> None:
    windows = [cumulative(m) for m in parse_mountstats(many(3)).mounts]
    notes = [n for w in shared_transports(windows) for n in w.notes if "shared with" in n]
    assert "shared with /mnt/vol00001, /mnt/vol00002 (same server)" in notes[0]
