"""Kernel-log tailing for ``trainguard watch``: specs, journal export parsing, positions.

Requirement: across polls and restarts every kernel-log line is classified exactly once: appended
lines once, half-written lines when complete, lines written while the service was down after a
restart, a rotated or truncated file from its start; malformed journal data and saved positions
are warnings, never exceptions.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

import pytest

from trainguard.errors import ConfigError
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.evidence.rules import RuleSet, load_rules
from trainguard.filetail import FileTail
from trainguard.watch.kernlog import (
    JournalExportReader,
    JournalTail,
    KernelLogTailer,
    LogSource,
    entry_lines,
    parse_sources,
)

# 2024-05-01T10:00:00Z; past times, so the scanner's year correction leaves them alone.
T0 = 1714557600
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID48 = ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit "
         "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.")
XID13 = ("NVRM: Xid (PCI:0000:ca:00): 13, pid=2231, name=python, Graphics Exception: ESR "
         "0x50da30=0x1f000e 0x50da34=0x20 0x50da28=0x4c1eb72 0x50da2c=0x174")
NOISE = "May  1 10:00:01 node2 kernel: [812346.000001] EXT4-fs (nvme0n1p1): mounted filesystem"


def syslog(msg: str, host: str = "somehost", second: int = 0) -> bytes:
    """A kernel line as rsyslog writes it (RFC 3164, no year)."""
    return f"May  1 10:00:{second:02d} {host} kernel: [812345.678901] {msg}\n".encode()


def field(name: str, value: bytes) -> bytes:
    """One export-format field: text as KEY=value, with a newline as KEY + le64 length."""
    if b"\n" in value:
        return name.encode() + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"
    return name.encode() + b"=" + value + b"\n"


def entry(msg: str | bytes, *, host: str = "node07", usec: int = T0 * 1_000_000 + 123456,
          ident: str | None = "kernel", cursor: int = 1) -> bytes:
    """One entry as ``journalctl -o export`` writes it (trusted fields, then the payload)."""
    body = msg.encode() if isinstance(msg, str) else msg
    out = (field("__CURSOR", f"s=739ad463348b4ceca5a9e69c95a3c93f;i={cursor:x};b=6c7c6013a8b3"
                 f"43b8b3f1e6c4b5b3e1d1;m={usec:x};t={usec:x};x=f1c3a2b4".encode())
           + field("__REALTIME_TIMESTAMP", str(usec).encode())
           + field("__MONOTONIC_TIMESTAMP", b"812345678901")
           + field("_BOOT_ID", b"6c7c6013a8b343b8b3f1e6c4b5b3e1d1")
           + field("_TRANSPORT", b"kernel")
           + field("PRIORITY", b"3")
           + field("SYSLOG_FACILITY", b"0"))
    if ident is not None:
        out += field("SYSLOG_IDENTIFIER", ident.encode())
    out += field("_HOSTNAME", host.encode()) + field("MESSAGE", body)
    return out + b"\n"


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def xids(events: list[FailureEvent]) -> list[int]:
    """The events' XIDs; -1 for an event without one."""
    return [ev.xid if ev.xid is not None else -1 for ev in events]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def tailer_for(rules: RuleSet, *specs: str, from_end: bool = False,
               max_bytes: int = 4 << 20) -> KernelLogTailer:
    return KernelLogTailer(parse_sources(specs), rules, from_end=from_end,
                           max_bytes_per_poll=max_bytes)


def restart(old: KernelLogTailer, rules: RuleSet, *specs: str,
            from_end: bool = True) -> KernelLogTailer:
    """A new service process: the position goes through JSON, as it does on disk."""
    saved = json.loads(json.dumps(old.position()))
    new = tailer_for(rules, *specs, from_end=from_end)
    new.restore(saved)
    return new


# -- specs ------------------------------------------------------------------------------------


def test_specs_name_nodes_and_formats(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "node03.log").write_bytes(b"")
    (tmp_path / "kern.log").write_bytes(b"")
    (tmp_path / "node04.export").write_bytes(b"")
    (tmp_path / "dir").mkdir()
    with caplog.at_level(logging.WARNING):
        sources = parse_sources([
            f"gpu12={tmp_path}/kern.log", f"{tmp_path}/node03.log", f"{tmp_path}/kern.log.1",
            f"{tmp_path}/node04.export", f"journal:{tmp_path}/journal.txt",
            f"node05=journal:{tmp_path}/n5", str(tmp_path / "dir"),
        ])
    assert [(s.node, s.format, s.directory) for s in sources] == [
        ("gpu12", "text", False), ("node03", "text", False), (None, "text", False),
        ("node04", "journal-export", False), (None, "journal-export", False),
        ("node05", "journal-export", False), (None, "text", True)]
    # Not there yet: accepted (the log may be created later), one warning each.
    missing = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
    assert len(missing) == 3


@pytest.mark.parametrize(("spec", "match"), [
    ("", "no path"),
    ("   ", "no path"),
    ("=/var/log/kern.log", "empty node name"),
    (" =x", "empty node name"),
    ("node03=", "no path"),
    ("journal:", "no path"),
    ("bad node=/var/log/kern.log", "not a host name"),
    ("/nonexistent/logs/", "directory '/nonexistent/logs/' does not exist"),
    ("/dev/null", "not a regular file"),
])
def test_malformed_specs_are_config_errors(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_sources([spec])


def test_a_path_listed_twice_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        parse_sources([f"a={tmp_path}/k.log", f"b={tmp_path}/../{tmp_path.name}/k.log"])


def test_log_source_validates_its_fields() -> None:
    with pytest.raises(ValueError, match=r"kernel_log\.format"):
        LogSource(Path("x"), None, "json")  # type: ignore[arg-type]


# -- text logs --------------------------------------------------------------------------------


def test_xid_line_becomes_an_event_of_the_spec_node(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(syslog(XID79, host="whatever") + NOISE.encode() + b"\n")
    tailer = tailer_for(rules, f"node03={log}")
    (ev,) = tailer.poll()
    assert (ev.xid, ev.host, ev.time_kind) == (79, "node03", TimeKind.ABSOLUTE)
    assert ev.evidence[0].path == str(log) and ev.evidence[0].line_no == 1


def test_generic_file_name_takes_the_host_from_the_lines(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(syslog(XID79, host="node09"))
    (ev,) = tailer_for(rules, str(log)).poll()
    assert ev.host == "node09"


def test_appended_lines_are_reported_once_and_half_lines_wait(tmp_path: Path,
                                                              rules: RuleSet) -> None:
    log = tmp_path / "node03.log"
    log.write_bytes(syslog(XID79))
    tailer = tailer_for(rules, str(log))
    assert xids(tailer.poll()) == [79]
    assert tailer.poll() == []
    line = syslog(XID48)
    append(log, line[:40])
    assert tailer.poll() == []
    append(log, line[40:-1])
    assert tailer.poll() == []
    append(log, b"\n" + NOISE.encode() + b"\n")
    (ev,) = tailer.poll()
    assert (ev.xid, ev.host, ev.evidence[0].line_no) == (48, "node03", 2)
    assert tailer.poll() == []


def test_restart_reports_lines_written_while_down_exactly_once(tmp_path: Path,
                                                               rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    spec = f"node03={log}"
    log.write_bytes(syslog(XID79) + syslog(XID48)[:30])  # a half line when the service stops
    first = tailer_for(rules, spec, from_end=True)
    assert first.poll() == []  # from_end: history is not reported
    append(log, syslog(XID48)[30:])
    assert xids(first.poll()) == []  # the line begun before the start is skipped whole
    append(log, syslog(XID13)[:50])
    assert first.poll() == []
    append(log, syslog(XID13)[50:] + syslog(XID48, second=5))  # written while down
    second = restart(first, rules, spec)
    events = second.poll()
    assert xids(events) == [13, 48]
    assert [ev.evidence[0].line_no for ev in events] == [3, 4]
    assert second.poll() == []


def test_restart_after_a_from_end_start_mid_line(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(syslog(XID79)[:30])
    first = tailer_for(rules, f"n1={log}", from_end=True)
    first.poll()
    # Down before the rest of the history's half line arrived: it stays unreported.
    append(log, syslog(XID79)[30:] + syslog(XID48))
    assert xids(restart(first, rules, f"n1={log}").poll()) == [48]


def test_rotation_while_down_reads_the_new_file_from_its_start(tmp_path: Path,
                                                               rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(syslog(XID79) + syslog(XID48))
    first = tailer_for(rules, f"node03={log}")
    assert xids(first.poll()) == [79, 48]
    saved = first.position()
    new = tmp_path / "kern.log.new"
    new.write_bytes(syslog(XID13) + NOISE.encode() + b"\n" + syslog(XID79))  # longer than before
    os.replace(new, log)
    second = restart(first, rules, f"node03={log}")
    assert saved == first.position()
    events = second.poll()
    assert xids(events) == [13, 79]
    assert [ev.evidence[0].line_no for ev in events] == [1, 3]


def test_truncation_while_running_and_while_down(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(syslog(XID79) + syslog(XID48))
    tailer = tailer_for(rules, f"n1={log}")
    assert xids(tailer.poll()) == [79, 48]
    log.write_bytes(syslog(XID13))  # echo > kern.log, then a new line
    assert xids(tailer.poll()) == [13]
    append(log, syslog(XID48))
    saved = tailer.position()
    log.write_bytes(syslog(XID79))  # truncated while down: same inode, shorter
    second = tailer_for(rules, f"n1={log}")
    second.restore(saved)
    assert xids(second.poll()) == [79]


def test_reads_are_bounded_per_poll(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    lines = [syslog(XID79 if i % 10 == 0 else XID48, second=i % 60) for i in range(100)]
    log.write_bytes(b"".join(lines))
    tailer = tailer_for(rules, f"n1={log}", max_bytes=1000)
    polls = [tailer.poll() for _ in range(len(b"".join(lines)) // 1000 + 2)]
    assert all(len(p) <= 1000 // len(lines[1]) + 1 for p in polls)
    assert [ev.evidence[0].line_no for p in polls for ev in p] == list(range(1, 101))
    assert tailer.poll() == []


def test_a_missing_file_is_read_once_it_appears(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "node03.log"
    tailer = tailer_for(rules, str(log), from_end=True)
    assert tailer.poll() == []
    log.write_bytes(syslog(XID79))  # created after the start: read whole
    assert xids(tailer.poll()) == [79]


# -- directories ------------------------------------------------------------------------------


def test_directory_spec_picks_up_new_files(tmp_path: Path, rules: RuleSet) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "node01.log").write_bytes(syslog(XID79))
    (d / ".node09.log.swp").write_bytes(syslog(XID79))
    (d / "node08.log.2.gz").write_bytes(b"\x1f\x8b" + syslog(XID79))
    tailer = tailer_for(rules, str(d))
    assert [(ev.xid, ev.host) for ev in tailer.poll()] == [(79, "node01")]
    (d / "node02.log").write_bytes(syslog(XID48, host="elsewhere"))
    assert [(ev.xid, ev.host) for ev in tailer.poll()] == [(48, "node02")]
    (d / "node02.log").unlink()
    assert tailer.poll() == []
    assert [p.name for p in tailer.files] == ["node01.log"]


def test_directory_from_end_skips_present_files_only(tmp_path: Path, rules: RuleSet) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "node01.log").write_bytes(syslog(XID79))
    tailer = tailer_for(rules, str(d), from_end=True)
    assert tailer.poll() == []
    (d / "node02.log").write_bytes(syslog(XID48))
    append(d / "node01.log", syslog(XID13))
    assert sorted((ev.xid, ev.host) for ev in tailer.poll()) == [(13, "node01"), (48, "node02")]


def test_rotation_in_a_directory_does_not_report_the_old_file_again(tmp_path: Path,
                                                                     rules: RuleSet) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    log = d / "node01.log"
    log.write_bytes(syslog(XID79))
    tailer = tailer_for(rules, str(d))
    assert xids(tailer.poll()) == [79]
    append(log, syslog(XID48))  # written just before logrotate renamed the file
    os.rename(log, d / "node01.log.1")
    log.write_bytes(syslog(XID13))
    assert sorted(xids(tailer.poll())) == [13, 48]
    # And once more, now while the service is down: node01.log.1 -> .2.gz, node01.log -> .1
    append(log, syslog(XID79, second=9))
    os.rename(d / "node01.log.1", d / "node01.log.2.gz")
    os.rename(log, d / "node01.log.1")
    log.write_bytes(syslog(XID48, second=9))
    second = restart(tailer, rules, str(d))
    assert sorted((ev.xid, ev.host) for ev in second.poll()) == [(48, "node01"), (79, "node01")]
    assert second.poll() == []


# -- journal export ---------------------------------------------------------------------------


def test_journal_text_fields_become_a_prefixed_line() -> None:
    reader = JournalExportReader()
    (got,) = reader.feed(entry("hello world=1"))
    assert got["MESSAGE"] == b"hello world=1" and got["_HOSTNAME"] == b"node07"
    assert entry_lines(got) == ["2024-05-01T10:00:00.123456+00:00 node07 kernel: hello world=1"]
    assert reader.pending == 0 and reader.garbage == 0


def test_journal_binary_field_with_newlines_gives_one_line_each() -> None:
    msg = b"NVRM: GPU at PCI:0000:3b:00: GPU-1\nNVRM: second line\r\n"
    (got,) = JournalExportReader().feed(entry(msg, ident="nvidia-persistenced", host="n 2"))
    assert got["MESSAGE"] == msg
    stamp = "2024-05-01T10:00:00.123456+00:00"
    assert entry_lines(got) == [f"{stamp} n_2 nvidia-persistenced: NVRM: GPU at PCI:0000:3b:00: "
                                "GPU-1", f"{stamp} n_2 nvidia-persistenced: NVRM: second line"]


def test_journal_entry_without_host_or_identifier() -> None:
    lines = entry_lines({"MESSAGE": b"x", "__REALTIME_TIMESTAMP": b"nonsense"})
    assert lines == ["- kernel: x"]


def test_journal_split_at_every_byte_boundary() -> None:
    sample = entry(XID79, cursor=1) + entry(b"a\nb", cursor=2) + entry("third", cursor=3)
    whole = JournalExportReader().feed(sample)
    assert [e["MESSAGE"] for e in whole] == [XID79.encode(), b"a\nb", b"third"]
    for cut in range(len(sample) + 1):
        reader = JournalExportReader()
        got = reader.feed(sample[:cut])
        consumed = cut - reader.pending
        assert sample[:consumed].endswith(b"\n\n") or consumed == 0
        got += reader.feed(sample[cut:])
        assert got == whole, cut
        assert (reader.pending, reader.garbage) == (0, 0)


@pytest.mark.parametrize(("garbage", "why"), [
    (b"MESSAGE\n" + struct.pack("<Q", 17 << 20) + b"x" * 64 + b"\n\n", "of 17825792 bytes"),
    (b"MESSAGE\n" + struct.pack("<Q", 3) + b"abcd\n\n", "not followed by a newline"),
    (b"this is no field\n\n", "not a field"),
    (b"MESSAGE=ok\n\x00\xffgarbage=1\nMESSAGE=x\n\n", "not a field"),
    (b"=no name\n\n", "not a field"),
])
def test_journal_garbage_is_skipped_to_the_next_entry(
        garbage: bytes, why: str, caplog: pytest.LogCaptureFixture) -> None:
    reader = JournalExportReader(where="n.export")
    with caplog.at_level(logging.WARNING):
        got = []
        for i in range(0, len(garbage), 7):  # garbage arriving piecemeal is still garbage
            got += reader.feed(garbage[i:i + 7])
        got += reader.feed(entry("after"))
    assert [e["MESSAGE"] for e in got] == [b"after"]
    assert reader.garbage == 1
    assert "n.export: malformed journal export data at byte" in caplog.text
    assert why in caplog.text


def test_journal_xid_becomes_an_event_with_host_and_absolute_time(tmp_path: Path,
                                                                  rules: RuleSet) -> None:
    path = tmp_path / "kern.export"
    path.write_bytes(entry("Linux version 6.8.0", cursor=1) + entry(XID79, cursor=2))
    (ev,) = tailer_for(rules, str(path)).poll()
    assert (ev.xid, ev.host, ev.time_kind) == (79, "node07", TimeKind.ABSOLUTE)
    assert ev.time == pytest.approx(T0 + 0.123456, abs=1e-6)
    assert ev.gpu_pci is not None and ev.gpu_pci.startswith("0000:3b:00")
    assert ev.evidence[0].line_no == 2


def test_journal_node_spec_forces_the_host(tmp_path: Path, rules: RuleSet) -> None:
    path = tmp_path / "j"
    path.write_bytes(entry(XID79, host="container-name"))
    (ev,) = tailer_for(rules, f"node03=journal:{path}").poll()
    assert (ev.host, ev.xid) == ("node03", 79)


def test_journal_file_tail_restart_and_garbage(tmp_path: Path, rules: RuleSet) -> None:
    path = tmp_path / "node05.export"
    path.write_bytes(entry(XID79, cursor=1) + b"junk line\n" + struct.pack("<Q", 1 << 40))
    first = tailer_for(rules, str(path))
    assert [(ev.xid, ev.host) for ev in first.poll()] == [(79, "node05")]
    append(path, b"more junk\n\n" + entry(XID48, cursor=2)[:-20])  # half an entry at the stop
    assert first.poll() == []
    assert first.warnings == 1 and "malformed journal" in first.recent_warnings[-1]
    append(path, entry(XID48, cursor=2)[-20:] + entry(XID13, cursor=3))  # while down
    second = restart(first, rules, str(path))
    assert xids(second.poll()) == [48, 13]
    assert second.poll() == []
    assert second.warnings == 0


def test_journal_restart_while_skipping_garbage(tmp_path: Path, rules: RuleSet) -> None:
    path = tmp_path / "n.export"
    path.write_bytes(b"no field here\n")
    first = tailer_for(rules, f"n1={path}")
    assert first.poll() == []
    assert first.position()[str(path)]["skip"] == 1
    append(path, b"MESSAGE=" + XID79.encode() + b"\n\n" + entry(XID48))  # garbage's entry ends
    assert xids(restart(first, rules, f"n1={path}").poll()) == [48]


def test_journal_from_end_starting_mid_entry(tmp_path: Path, rules: RuleSet) -> None:
    path = tmp_path / "n.export"
    whole = entry(XID79, cursor=1) + entry(XID48, cursor=2)
    for cut in (len(whole), len(whole) - 1, len(whole) - 2, len(whole) - 30):
        path.write_bytes(whole[:cut])
        tailer = tailer_for(rules, f"n1={path}", from_end=True)
        assert tailer.poll() == []
        append(path, whole[cut:] + entry(XID13, cursor=3))
        assert xids(tailer.poll()) == [13], cut
        assert tailer.warnings == 0


def test_journal_rotation_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "n.export"
    path.write_bytes(entry("one") + entry("two"))
    tail = JournalTail(path)
    data, first = tail.read()
    assert (data.count(b"\n"), first) == (2, 1)
    saved = tail.position()
    new = tmp_path / "new"
    new.write_bytes(entry("three"))
    os.replace(new, path)
    three = (b"2024-05-01T10:00:00.123456+00:00 node07 kernel: three\n", 1)
    assert tail.read() == three
    restored = JournalTail(path)
    restored.restore(saved)  # saved before the replacement: another inode now
    assert restored.read() == three
    path.write_bytes(entry("four"))  # truncated in place: shorter than the offset
    assert tail.read()[0].endswith(b"kernel: four\n")
    assert tail.garbage == 0


# -- positions --------------------------------------------------------------------------------


def test_file_tail_position_excludes_the_half_line(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_bytes(b"a\nb\npart")
    tail = FileTail(p)
    tail.read()
    pos = tail.position()
    assert pos == {"inode": p.stat().st_ino, "offset": 4, "line": 3, "skip_partial": 0}
    append(p, b"ial\n")
    again = FileTail(p)
    again.restore(json.loads(json.dumps(pos)))
    assert again.read() == (b"partial\n", 3)
    assert again.position()["offset"] == p.stat().st_size


@pytest.mark.parametrize("bad", [
    {}, {"inode": 1, "offset": -1, "line": 1}, {"inode": 1, "offset": 0, "line": 0},
    {"inode": True, "offset": 0, "line": 1}, {"inode": 1, "offset": "0", "line": 1},
])
def test_file_tail_rejects_a_malformed_position(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="position"):
        FileTail(tmp_path / "x").restore(bad)


def test_restore_ignores_unknown_and_malformed_entries(tmp_path: Path, rules: RuleSet) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(syslog(XID79))
    tailer = tailer_for(rules, f"n1={log}")
    tailer.restore({str(tmp_path / "other.log"): {"format": "text", "inode": 1, "offset": 0,
                                                  "line": 1},
                    str(log): {"format": "journal-export", "inode": 1, "offset": 0, "line": 1}})
    tailer.restore({str(log): {"inode": "x"}})
    tailer.restore({str(log): [1, 2]})
    tailer.restore([1, 2])  # type: ignore[arg-type]
    assert tailer.warnings == 5
    assert xids(tailer.poll()) == [79]  # nothing restored: read as a fresh start


def test_position_is_keyed_by_absolute_path(tmp_path: Path, rules: RuleSet,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("node03.log").write_bytes(syslog(XID79))
    tailer = tailer_for(rules, "node03.log")
    tailer.poll()
    assert list(tailer.position()) == [str(tmp_path / "node03.log")]
    assert tailer.position()[str(tmp_path / "node03.log")]["format"] == "text"
