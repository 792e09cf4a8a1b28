"""Plain `dmesg` (seconds since boot) in `trainguard logs classify`: the XID in a dmesg excerpt
and the NCCL timeouts it caused on the training ranks ten minutes later are one incident; the
boot-relative stamp is never shown as a date (JSON "time" null, "since_boot_s"); each such file
gets one warning; and boot-relative events are linked to wall-clock ones only when that is
unambiguous.

Fixture: tests/data/incidents/xid79-plain-dmesg/ -- gpu-node03's `dmesg` (XID 79 on 9a:00 at
183412 s after boot), and the watchdog timeouts of ranks 24-29 on gpu-node03 and gpu-node04
(14:50:18, a 600 s collective timeout: the hang began at 14:40)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trainguard.evidence import FailureEvent, ScanOptions, TimeKind, correlate, load_rules
from trainguard.evidence import scan_paths as scan
from trainguard.taxonomy import Action, Category, Severity

CASE = Path(__file__).resolve().parents[2] / "data" / "incidents" / "xid79-plain-dmesg"
DMESG = CASE / "gpu-node03" / "dmesg.txt"
XID_BOOT_S = 183412.004511
OPTIONS = ScanOptions(host_from_path=True, default_year=2026)
A_2020_DATE = 1.577e9
"""Any unix time of a log line is after this (2019-12-29); seconds since boot are far below."""


def classify_json(*paths: Path) -> tuple[list[dict[str, Any]], str]:
    from trainguard.cli.main import app

    result = CliRunner().invoke(app, ["logs", "classify", "--host-from-path", "--year", "2026",
                                      "--json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def times(doc: object) -> Iterator[object]:
    """Every "time", "start" and "end" value anywhere in a JSON document."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("time", "start", "end"):
                yield value
            yield from times(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from times(item)


def test_the_xid_and_the_timeouts_it_caused_are_one_incident() -> None:
    incidents, _ = classify_json(CASE)
    assert len(incidents) == 1, [i["summary"] for i in incidents]
    (inc,) = incidents
    assert (inc["category"], inc["xid"], inc["host"], inc["gpu"]) == \
        ("gpu_hardware", 79, "gpu-node03", "0000:9a:00.0")
    timeouts = [e for e in inc["related"] if e["category"] == "nccl_timeout_hang"]
    assert {e["rank"] for e in timeouts} == set(range(24, 30))
    assert set(inc["hosts"]) == {"gpu-node03", "gpu-node04"}


def test_seconds_since_boot_are_never_a_date() -> None:
    (inc,), _ = classify_json(CASE)
    root = inc["root_cause"]
    assert (root["time"], root["time_kind"], root["since_boot_s"]) == \
        (None, "relative", XID_BOOT_S)
    assert all(t is None or t > A_2020_DATE for t in times(inc)), list(times(inc))
    assert inc["start"] is not None and inc["start"] > A_2020_DATE  # from the ranks' clocks


def test_one_warning_per_file_with_seconds_since_boot(tmp_path: Path) -> None:
    second = tmp_path / "gpu-node05" / "dmesg.txt"
    second.parent.mkdir()
    second.write_text(DMESG.read_text())
    _, stderr = classify_json(CASE, second)
    warned = [line for line in stderr.splitlines() if "seconds since boot" in line]
    assert len(warned) == 2, stderr
    assert sum(str(DMESG) in line for line in warned) == 1
    assert sum(str(second) in line for line in warned) == 1
    assert not any("rank" in line for line in warned)


def test_dmesg_T_lines_are_on_the_wall_clock_and_not_warned_about(tmp_path: Path) -> None:
    case = tmp_path / "case"
    shutil.copytree(CASE, case)
    (case / "gpu-node03" / "dmesg.txt").write_text(
        "[Mon Mar  9 14:40:12 2026] NVRM: Xid (PCI:0000:9a:00): 79, pid=23117, name=python, "
        "GPU has fallen off the bus.\n")
    (inc,), stderr = classify_json(case)
    assert "seconds since boot" not in stderr
    assert inc["xid"] == 79 and inc["root_cause"]["time_kind"] == "absolute"
    assert inc["root_cause"]["time"] > A_2020_DATE


def test_boot_time_stays_apart_when_the_incident_it_belongs_to_is_ambiguous(
        tmp_path: Path) -> None:
    # A second failure on the wall clock, five hours later: the XID cannot be placed on it.
    case = tmp_path / "case"
    shutil.copytree(CASE, case)
    with (case / "gpu-node04" / "rank28.log").open("a") as f:
        f.write("[rank28]: 2026-03-09 19:52:40,118 ERROR train.py:310 torch.OutOfMemoryError: "
                "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                "79.11 GiB of which 1.06 GiB is free.\n")
    rules = load_rules()
    events, _ = scan([str(case)], rules, OPTIONS)
    incidents = correlate(events, rules)
    xid = [i for i in incidents if i.xid == 79]
    assert len(xid) == 1 and not any(e.category is Category.NCCL_TIMEOUT_HANG
                                     for e in xid[0].related)
    assert len(incidents) == 3


def test_two_dmesg_files_that_name_no_host_are_two_clocks(tmp_path: Path) -> None:
    # Two machines' excerpts, uptimes a minute apart: their seconds since boot are not one clock.
    for name, boot_s in (("a.txt", 5000.0), ("b.txt", 5060.0)):
        (tmp_path / name).write_text(
            f"[{boot_s:12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has "
            "fallen off the bus.\n")
    rules = load_rules()
    events, _ = scan([str(tmp_path)], rules, ScanOptions())
    assert [e.time_kind for e in events] == [TimeKind.RELATIVE] * 2
    assert len(correlate(events, rules)) == 2


def test_a_boot_time_event_keeps_its_seconds_through_json() -> None:
    ev = FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
                      severity=Severity.FATAL, signature="xid", summary="XID 79",
                      time=XID_BOOT_S, time_kind=TimeKind.RELATIVE, xid=79)
    doc = ev.to_dict()
    assert (doc["time"], doc["since_boot_s"]) == (None, XID_BOOT_S)
    assert FailureEvent.from_dict(json.loads(json.dumps(doc))) == ev
    wall = FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
                        severity=Severity.FATAL, signature="xid", summary="XID 79",
                        time=1.7e9, time_kind=TimeKind.ABSOLUTE, xid=79)
    assert "since_boot_s" not in wall.to_dict()
    assert FailureEvent.from_dict(wall.to_dict()) == wall


@pytest.mark.parametrize("boot_s", [12.5, XID_BOOT_S])
def test_an_older_writer_s_boot_time_is_still_read(boot_s: float) -> None:
    # An agent of an older version sends a relative event with its seconds in "time".
    doc = {"category": "gpu_hardware", "action": "reboot_node", "severity": "fatal",
           "signature": "xid", "summary": "XID 79", "time": boot_s, "time_kind": "relative"}
    ev = FailureEvent.from_dict(doc)
    assert (ev.time, ev.time_kind) == (boot_s, TimeKind.RELATIVE)
