"""The agent's kernel-log sources: each kind is read on the host and classified."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from trainguard.agent.klog import kmsg_line, open_kernel_log
from trainguard.errors import ConfigError
from trainguard.evidence.rules import load_rules

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def test_kmsg_records_become_kernel_log_lines() -> None:
    assert kmsg_line(b"3,77,5000001,-;" + XID.encode() + b"\n SUBSYSTEM=pci\n") == \
        f"[    5.000001] {XID}"
    assert kmsg_line(b"garbage") == "[    0.000000] "


def test_a_file_counts_its_recent_history_and_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(f"[  1.0] {XID}\n")  # written just now: recent history counts
    reader = open_kernel_log(str(log), "h2", load_rules(), time.time(), tmp_path / "w")
    first = reader.poll(time.time())
    assert [(e.host, e.xid) for e in first] == [("h2", 79)]
    with log.open("a") as f:
        f.write(f"[  2.0] {XID}\n")
    assert [e.xid for e in reader.poll(time.time())] == [79]


def test_a_directory_and_a_journal_export_are_followed_from_their_end(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "old.log").write_text(f"[  1.0] {XID}\n")  # before the run: not reported
    reader = open_kernel_log(str(logs), "h3", load_rules(), time.time(), tmp_path / "w")
    assert reader.poll(time.time()) == []
    (logs / "new.log").write_text(f"[  3.0] {XID}\n")  # a file that appears later
    assert [(e.host, e.xid) for e in reader.poll(time.time())] == [("h3", 79)]

    export = tmp_path / "k.export"
    export.write_bytes(b"")
    journal = open_kernel_log(f"journal:{export}", "h4", load_rules(), time.time(),
                              tmp_path / "w2")
    assert journal.poll(time.time()) == []
    entry = (f"__REALTIME_TIMESTAMP={int(time.time() * 1e6)}\nMESSAGE={XID}\n"
             "_HOSTNAME=h4\n\n").encode()
    with export.open("ab") as f:
        f.write(entry)
    assert [(e.host, e.xid) for e in journal.poll(time.time())] == [("h4", 79)]


def test_an_unreadable_live_source_is_a_clear_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import trainguard.agent.klog as klog

    monkeypatch.setattr(klog, "KMSG", str(tmp_path / "no-kmsg"))
    monkeypatch.setattr(klog, "JOURNALCTL", "journalctl")
    with pytest.raises(ConfigError, match="cannot read"):
        klog._kmsg("h1", load_rules(), time.time(), tmp_path)
