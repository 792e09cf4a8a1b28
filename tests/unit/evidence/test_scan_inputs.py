"""What the scanner reads: NUL-padded logs, FIFOs, devices, bounded gzip, folded repeats.

Requirement (issue #16): a kernel log NUL-padded by a crash is scanned, not skipped as binary;
a FIFO inside a scanned directory is skipped (it used to hang the scan), a device named on the
command line is refused (``/dev/zero`` never ends); gzip/pipe input is read up to a limit that is
reported; a million repeats of one XID become one event with a count, never 1 GB of events.
"""

from __future__ import annotations

import gzip
import os
import stat
import threading
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.aggregate import REPEATS_FIELD, EventAggregator, last_time, repeats
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.evidence.inputs import binary_reason, iter_inputs
from trainguard.evidence.rules import RuleSet
from trainguard.taxonomy import Action, Category, Severity

XID = ("May  1 10:00:{s:02d} node2 kernel: [812345.678901] NVRM: Xid (PCI:0000:3b:00): 79, "
       "pid=48211, name=python, GPU has fallen off the bus.")


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _xid(s: int = 0) -> bytes:
    return XID.format(s=s).encode()


# --- NUL bytes: drop the bytes, keep the file ---------------------------------------------------


@pytest.mark.parametrize("pad", [16, 20_000, 3 << 20])
def test_nul_padded_kernel_log_keeps_both_xid_lines(tmp_path: Path, rules: RuleSet,
                                                     pad: int) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(_xid(1) + b"\n" + b"\x00" * pad + _xid(2) + b"\n" + b"\x00" * 100)

    events, stats = scan_paths([str(log)], rules, ScanOptions(default_year=2024))

    assert [(e.xid, e.evidence[0].line_no, e.host) for e in events] == [(79, 1, "node2"),
                                                                       (79, 2, "node2")]
    assert all(e.time_kind is TimeKind.ABSOLUTE for e in events)  # the prefix still parses
    assert "\x00" not in events[1].evidence[0].text
    assert stats.files_read == 1 and stats.files_skipped == 0
    assert [w.message for w in stats.warnings] == [f"{pad + 100:,} NUL byte(s) dropped "
                                                   "(crash-time padding?); the text around them "
                                                   "was scanned"]


def test_file_of_only_nul_bytes_is_read_not_skipped(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"\x00" * 10_000)
    events, stats = scan_paths([str(log)], rules)
    assert events == [] and stats.files_read == 1
    assert "NUL" in stats.warnings[0].message


@pytest.mark.parametrize(("head", "binary"), [
    (b"\x7fELF\x02\x01\x01\x00" + _xid(), True),
    (b"PK\x03\x04\x14\x00" + b"\x00" * 64, True),
    (bytes(range(1, 32)) * 40, True),
    (b"\x00" * 4096 + _xid(), False),
    (b"\x1b[31m" + _xid() + b"\x1b[0m\r\n\t", False),
    ("ünïcödé log line ✓\n".encode() * 50, False),
    (b"", False),
])
def test_binary_is_decided_by_content_not_by_one_nul(head: bytes, binary: bool) -> None:
    assert (binary_reason(head) is not None) is binary


# --- FIFOs, sockets and devices -----------------------------------------------------------------


def _scan_in_thread(paths: list[str], rules: RuleSet, fifo: Path | None = None
                    ) -> tuple[list[FailureEvent], list[str], bool]:
    """Scan in a thread; a scan blocked on ``fifo`` is released by opening it for writing."""
    result: dict[str, object] = {}

    def run() -> None:
        events, stats = scan_paths(paths, rules)
        result["events"] = events
        result["warnings"] = [f"{w.path}: {w.message}" for w in stats.warnings]

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=10)
    hung = t.is_alive()
    if hung and fifo is not None:  # unblock the reader so the thread ends
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(timeout=10)
    return result.get("events", []), result.get("warnings", []), hung  # type: ignore[return-value]


def test_fifo_inside_a_directory_is_skipped_with_a_warning(tmp_path: Path,
                                                           rules: RuleSet) -> None:
    (tmp_path / "kern.log").write_bytes(_xid() + b"\n")
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)

    events, warnings, hung = _scan_in_thread([str(tmp_path)], rules, fifo)

    assert not hung
    assert [e.xid for e in events] == [79]
    assert warnings == [f"{fifo}: not a regular file (fifo): skipped"]


def test_device_named_explicitly_is_refused(rules: RuleSet) -> None:
    if not stat.S_ISCHR(os.stat("/dev/zero").st_mode):
        pytest.skip("no /dev/zero")
    events, warnings, hung = _scan_in_thread(["/dev/zero"], rules)
    assert not hung
    assert events == []
    assert warnings == ["/dev/zero: not a regular file or pipe (character device): skipped"]


def test_pipe_named_explicitly_is_read(tmp_path: Path, rules: RuleSet) -> None:
    fifo = tmp_path / "from-ssh"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(_xid() + b"\n")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    events, warnings, hung = _scan_in_thread([str(fifo)], rules, fifo)
    writer.join(timeout=10)
    assert not hung
    assert [e.xid for e in events] == [79] and warnings == []


def test_iter_inputs_lists_only_regular_files(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("x\n")
    os.mkfifo(tmp_path / "b.fifo")
    warned: list[str] = []
    found = list(iter_inputs([str(tmp_path)], lambda w: warned.append(w.message)))
    assert found == [(str(tmp_path / "a.log"), str(tmp_path))]
    assert warned == ["not a regular file (fifo): skipped"]


# --- bounded decompression ---------------------------------------------------------------------


def test_gzip_is_read_up_to_max_bytes_with_a_warning(tmp_path: Path, rules: RuleSet) -> None:
    gz = tmp_path / "kern.log.gz"
    gz.write_bytes(gzip.compress(_xid(1) + b"\n" + b"\n" * (8 << 20) + _xid(2) + b"\n"))

    events, stats = scan_paths([str(gz)], rules, ScanOptions(max_bytes=1 << 20))

    assert [e.evidence[0].line_no for e in events] == [1]
    assert stats.bytes_read == 1 << 20
    assert [w.message for w in stats.warnings] == [
        f"stopped after {1 << 20:,} bytes (--max-bytes); the rest was not scanned"]


def test_gzip_within_max_bytes_is_read_whole(tmp_path: Path, rules: RuleSet) -> None:
    gz = tmp_path / "kern.log.gz"
    gz.write_bytes(gzip.compress(_xid(1) + b"\n" + b"\n" * 1000 + _xid(2) + b"\n"))
    events, stats = scan_paths([str(gz)], rules, ScanOptions(max_bytes=1 << 20))
    assert [e.evidence[0].line_no for e in events] == [1, 1002]
    assert stats.warnings == []


def test_max_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"scan\.max_bytes"):
        ScanOptions(max_bytes=0)


# --- folding repeats: bounded memory, nothing dropped ------------------------------------------


def test_repeats_fold_into_one_event_with_a_count(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"".join(_xid(i * 60 // 5000) + b"\n" for i in range(5000)))

    events, stats = scan_paths([str(log)], rules, ScanOptions(default_year=2024,
                                                              merge_gap_s=900))

    (ev,) = events
    assert repeats(ev) == 5000 == stats.events
    assert [e.line_no for e in ev.evidence] == [1, 5000]  # first and last line only: the
    assert len(ev.fields) <= 6  # event's size does not grow with the run
    (inc,) = correlate(events, rules)
    assert inc.event_count == 5000 and inc.related_count == 4999


def _ev(t: float | None, line: int, host: str = "n1", path: str = "a.log") -> FailureEvent:
    return FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
                        severity=Severity.FATAL, signature="xid", summary="XID 79", xid=79,
                        host=host, time=t,
                        time_kind=TimeKind.ABSOLUTE if t is not None else TimeKind.NONE,
                        evidence=(EvidenceLine(path, line, f"line {line}"),))


def test_aggregator_splits_runs_at_gaps_and_keys() -> None:
    agg = EventAggregator(gap_s=60)
    for ev in (_ev(0, 1), _ev(30, 2), _ev(80, 3), _ev(500, 4), _ev(510, 5, host="n2")):
        agg.add(ev)
    out = agg.events()
    assert [(e.time, repeats(e), last_time(e), e.host) for e in out] == [
        (0, 3, 80.0, "n1"), (500, 1, 500, "n1"), (510, 1, 510, "n2")]
    assert agg.total == 5
    assert dict(out[0].fields)[REPEATS_FIELD] == "3"


def test_untimed_repeats_fold_only_between_the_same_timed_events() -> None:
    agg = EventAggregator(gap_s=60)
    other = FailureEvent(category=Category.OOM_HOST, action=Action.FIX_CONFIG,
                         severity=Severity.FATAL, signature="host_oom_killer", summary="oom",
                         time=100.0, time_kind=TimeKind.ABSOLUTE,
                         evidence=(EvidenceLine("a.log", 3, "oom"),))
    for ev in (_ev(None, 1), _ev(None, 2), other, _ev(None, 4)):
        agg.add(ev)
    assert [(e.signature, repeats(e)) for e in agg.events()] == [
        ("xid", 2), ("host_oom_killer", 1), ("xid", 1)]


def test_folded_run_still_links_an_incident_at_its_end() -> None:
    """A run from t=0 to t=3000 (gaps of 600 s) and an OOM at 3500 stay one incident."""
    agg = EventAggregator(gap_s=900)
    for i in range(6):
        agg.add(_ev(600.0 * i, i + 1))
    oom = FailureEvent(category=Category.OOM_HOST, action=Action.FIX_CONFIG,
                       severity=Severity.FATAL, signature="host_oom_killer", summary="oom",
                       host="n1", time=3500.0, time_kind=TimeKind.ABSOLUTE,
                       evidence=(EvidenceLine("b.log", 1, "oom"),))
    folded = [*agg.events(), oom]
    assert len(folded) == 2
    (inc,) = correlate(folded)
    assert inc.end == 3500.0 and inc.event_count == 7


def test_kernel_log_tailer_reads_through_nul_padding(tmp_path: Path, rules: RuleSet) -> None:
    from trainguard.watch.kernlog import KernelLogTailer, parse_sources

    log = tmp_path / "kern.log"
    log.write_bytes(_xid(1) + b"\n")
    tailer = KernelLogTailer(parse_sources([f"node03={log}"]), rules)
    assert [e.xid for e in tailer.poll()] == [79]
    with log.open("ab") as f:  # the crash: a NUL-padded block, then the lines after reboot
        f.write(b"\x00" * 4096 + _xid(2) + b"\n")
    (ev,) = tailer.poll()
    assert (ev.xid, ev.host, ev.time_kind) == (79, "node03", TimeKind.ABSOLUTE)
    assert ev.evidence[0].line_no == 2 and "\x00" not in ev.evidence[0].text
