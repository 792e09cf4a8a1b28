"""XID catalog and parsing of NVRM Xid / NVSwitch SXid / fallen-off-the-bus reports."""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path

import pytest

from trainguard.evidence import correlate, load_rules, scan_paths, xid_catalog, xid_info
from trainguard.evidence.classify import LineContext, classify_line
from trainguard.evidence.events import FailureEvent
from trainguard.evidence.lineparse import parse_prefix
from trainguard.evidence.xid import normalize_pci, parse_xid_line
from trainguard.taxonomy import Action, Category, Severity


def _catalog_rows() -> list[dict[str, str]]:
    text = resources.files("trainguard.evidence").joinpath("data/xid_catalog.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


def _classify(line: str) -> FailureEvent:
    ev = classify_line(load_rules(), line, LineContext("kern.log", 1, parse_prefix(line, 2024)))
    assert ev is not None, line
    return ev


# --- the catalog (architecture tests) ----------------------------------------------------------


def test_catalog_loads_every_csv_row() -> None:
    rows = _catalog_rows()
    assert len(rows) > 150
    assert sorted(xid_catalog()) == sorted(int(r["xid"]) for r in rows)


@pytest.mark.parametrize("xid", sorted(int(r["xid"]) for r in _catalog_rows()))
def test_every_catalog_xid_maps_to_category_action_severity(xid: int) -> None:
    info = xid_catalog()[xid]
    assert isinstance(info.category, Category)
    assert isinstance(info.action, Action)
    assert isinstance(info.severity, Severity)
    assert info.category is not Category.UNKNOWN
    assert info.name
    assert info.advice, f"XID {xid}: no advice for action {info.action}"
    if info.nvidia_fatal:
        assert info.severity is Severity.FATAL


@pytest.mark.parametrize(
    ("xid", "category", "action"),
    [
        (79, Category.GPU_HARDWARE, Action.REBOOT_NODE),
        (48, Category.GPU_MEMORY_ECC, Action.RESET_GPU),
        (64, Category.GPU_MEMORY_ECC, Action.RESET_GPU),
        (95, Category.GPU_MEMORY_ECC, Action.RESET_GPU),
        (74, Category.NVLINK_INTERCONNECT, Action.REBOOT_NODE),
        (149, Category.NVLINK_INTERCONNECT, Action.REBOOT_NODE),
        (119, Category.GPU_HARDWARE, Action.RESET_GPU),
        (13, Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE),
        (31, Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE),
    ],
)
def test_field_knowledge_for_common_xids(xid: int, category: Category, action: Action) -> None:
    info = xid_info(xid)
    assert (info.category, info.action) == (category, action)


def test_xid_43_and_45_are_not_fatal_on_their_own() -> None:
    assert xid_info(43).severity is not Severity.FATAL
    assert xid_info(45).severity is not Severity.FATAL


@pytest.mark.parametrize("xid", [0, 99999, max(xid_catalog()) + 1])
def test_an_unknown_xid_is_investigated_not_fatal(xid: int) -> None:
    info = xid_info(xid)
    assert info.xid == xid and not info.in_catalog and info.name == "UNKNOWN_XID"
    assert info.category is Category.GPU_HARDWARE
    assert info.severity is Severity.NON_FATAL and not info.nvidia_fatal
    assert info.action is Action.NONE
    assert "not in trainguard's XID catalog" in info.advice and "investigate" in info.advice
    assert all(xid_info(x).in_catalog for x in xid_catalog())


def test_an_unknown_xid_in_a_kernel_log_does_not_drain_the_node() -> None:
    from trainguard.recover.failure import is_node_fault

    unknown = max(xid_catalog()) + 38
    ev = _classify(f"Mar 29 15:38:59 node2 kernel: NVRM: Xid (PCI:0000:dc:00): {unknown}, "
                   "pid=1818990, name=python3, something new")
    assert ev.xid == unknown and ev.severity is Severity.NON_FATAL and not is_node_fault(ev)
    assert f"XID {unknown} UNKNOWN_XID" in ev.summary
    known = _classify("Mar 29 15:38:59 node2 kernel: NVRM: Xid (PCI:0000:dc:00): 79, "
                      "pid=1818990, name=python3, GPU has fallen off the bus.")
    assert is_node_fault(known)  # a catalogued fatal XID still does


# --- parse_xid_line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "xid", "pci", "pid", "process", "message"),
    [
        pytest.param(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
            79, "0000:3b:00.0", "1234", "python", "GPU has fallen off the bus.", id="classic"),
        pytest.param(
            "NVRM: Xid (PCI:0000:3b:00.0): 79, pid=1234, name=python, GPU has fallen off the bus.",
            79, "0000:3b:00.0", "1234", "python", "GPU has fallen off the bus.",
            id="function-suffix"),
        pytest.param(
            "NVRM: Xid (PCI:0000:ca:00): 13, pid=2231, name=VLLM::Worker, Graphics Exception: "
            "ESR 0x514730=0x20 0x514734=0x0",
            13, "0000:ca:00.0", "2231", "VLLM::Worker",
            "Graphics Exception: ESR 0x514730=0x20 0x514734=0x0", id="name-with-colons"),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): 62, 223b6a66 00002100 00000000 206dae68 206da022",
            62, "0000:01:00.0", None, None, "223b6a66 00002100 00000000 206dae68 206da022",
            id="no-pid-no-name"),
        pytest.param(
            "NVRM: Xid (PCI:00000000:3B:00): 48, pid=77, name=python3, An uncorrectable double "
            "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860.",
            48, "0000:3b:00.0", "77", "python3",
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
            "at physAddr 0x7fffa8860.", id="long-domain-uppercase"),
    ],
)
def test_parse_xid_line_forms(line: str, xid: int, pci: str, pid: str | None,
                              process: str | None, message: str) -> None:
    m = parse_xid_line(line)
    assert m is not None
    assert (m.xid, m.pci, m.pid, m.process, m.message) == (xid, pci, pid, process, message)
    assert not m.switch
    assert not m.inferred


def test_parse_xid_line_with_unknown_pid_and_name() -> None:
    m = parse_xid_line("NVRM: Xid (PCI:0000:07:00): 79, pid='<unknown>', name=<unknown>, "
                       "GPU has fallen off the bus.")
    assert m is not None
    assert (m.xid, m.pci) == (79, "0000:07:00.0")
    # The placeholders must not leak into the message.
    assert m.message == "GPU has fallen off the bus."


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "May  1 10:00:00 node2 kernel: ",
        "May  1 10:00:00 node2 kernel: [812345.678901] ",
        "[Wed May  1 10:00:00 2024] ",
        "[ 1843.308145] ",
        "2024-05-01T10:00:00.123456+00:00 node2 kernel: ",
    ],
)
def test_parse_xid_line_ignores_log_prefixes(prefix: str) -> None:
    m = parse_xid_line(prefix + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
                                "GPU has fallen off the bus.")
    assert m is not None
    assert (m.xid, m.pci, m.pid) == (79, "0000:3b:00.0", "1234")


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
        "NVRM: GPU at PCI:0000:3b:00: GPU-3c5e8e0a-7d2b-4b43-9f1e-2a8b6c1d9e77",
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "",
    ],
)
def test_parse_xid_line_returns_none_for_other_lines(line: str) -> None:
    assert parse_xid_line(line) is None


def test_elided_pci_still_yields_the_xid() -> None:
    m = parse_xid_line("NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
                       "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)")
    assert m is not None
    assert m.xid == 145
    assert m.pci == ""
    ev = _classify("Mar 29 15:38:59 node4 kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Fatal XC0 "
                   "i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000)")
    assert ev.xid == 145
    assert ev.gpu_pci is None
    assert ev.category is Category.NVLINK_INTERCONNECT


def test_nvlink5_xid_marked_nonfatal_in_message_is_not_fatal() -> None:
    # XIDs 144-150 carry their own severity ("Nonfatal"/"Fatal") in the message; a non-fatal
    # link event recovers by itself and must not ask for a node reboot.
    ev = _classify("Mar 29 15:38:59 node4 kernel: NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE "
                   "Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 "
                   "0x00100000 0x00000004)")
    assert ev.xid == 145
    assert ev.severity is not Severity.FATAL
    assert ev.action is not Action.REBOOT_NODE


@pytest.mark.parametrize(
    ("line", "xid", "device"),
    [
        ("I0501 10:00:00.000000       1 health.go:142] XidCriticalError: Xid=94 on "
         "Device=GPU-3c5e8e0a-7d2b-4b43-9f1e-2a8b6c1d9e77; marking device as unhealthy.",
         94, "GPU-3c5e8e0a-7d2b-4b43-9f1e-2a8b6c1d9e77"),
        ("XidCriticalError: Xid=48 on Device=GPU-3c5e8e0a-7d2b-4b43-9f1e-2a8b6c1d9e77, the "
         "device will go unhealthy.", 48, None),
    ],
)
def test_device_plugin_xid_report(line: str, xid: int, device: str | None) -> None:
    m = parse_xid_line(line)
    assert m is not None
    assert m.xid == xid
    if device is not None:
        assert m.process == device
    assert _classify(line).category is xid_info(xid).category


# --- primary / consequence XIDs ----------------------------------------------------------------


@pytest.mark.parametrize("xid", [43, 45])
def test_consequence_xid_follows_the_primary_xid(xid: int) -> None:
    line = (f"Mar 29 15:38:59 node2 kernel: NVRM: Xid (PCI:0000:dc:00): {xid}, pid=1818990, "
            "name=python3, Ch 00000001 caused by previous Xid 149")
    m = parse_xid_line(line)
    assert m is not None
    assert (m.xid, m.caused_by) == (xid, 149)

    ev = _classify(line)
    assert ev.xid == xid
    assert ev.caused_by_xid == 149
    assert ev.category is Category.NVLINK_INTERCONNECT
    assert ev.action is Action.REBOOT_NODE
    assert ev.severity is Severity.FATAL
    assert ev.host == "node2"
    assert ev.gpu_pci == "0000:dc:00.0"


def test_plain_xid_45_is_a_low_confidence_consequence() -> None:
    ev = _classify("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000008")
    assert ev.caused_by_xid is None
    assert ev.severity is not Severity.FATAL
    assert ev.confidence < 0.5


@pytest.mark.parametrize(
    ("new_state", "action"),
    [
        ("0x2 (Node Reboot Required)", Action.REBOOT_NODE),
        ("0x1 (GPU Reset Required)", Action.RESET_GPU),
    ],
)
def test_xid_154_recovery_action(new_state: str, action: Action) -> None:
    line = ("Mar 29 15:38:59 node2 kernel: NVRM: Xid (PCI:0000:01:00): 154, "
            f"GPU recovery action changed from 0x0 (None) to {new_state}")
    m = parse_xid_line(line)
    assert m is not None
    assert m.recovery_action == new_state.split("(")[1].rstrip(")")

    ev = _classify(line)
    assert ev.xid == 154
    assert ev.action is action
    assert ev.severity is Severity.FATAL
    assert ev.field_value("recovery_action") == m.recovery_action


def test_xid_154_back_to_none_is_informational() -> None:
    ev = _classify("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x1 "
                   "(GPU Reset Required) to 0x0 (None)")
    assert ev.action is Action.NONE
    assert ev.severity is Severity.INFO


# --- NVSwitch SXid -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "sxid", "fatal", "severity", "action"),
    [
        ("May  1 10:00:00 node7 kernel: [   38.178720] nvidia-nvswitch3: SXid "
         "(PCI:0000:04:00.0): 12028, Fatal, Link 44 egress non-posted PRIV error (First)",
         12028, True, Severity.FATAL, Action.REBOOT_NODE),
        ("May  1 10:00:00 node7 kernel: [   38.178720] nvidia-nvswitch3: SXid "
         "(PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
         22013, False, Severity.NON_FATAL, Action.NONE),
    ],
)
def test_sxid_lines(line: str, sxid: int, fatal: bool, severity: Severity,
                    action: Action) -> None:
    m = parse_xid_line(line)
    assert m is not None
    assert m.switch
    assert (m.xid, m.pci, m.switch_fatal) == (sxid, "0000:04:00.0", fatal)

    ev = _classify(line)
    assert ev.signature == "nvswitch_sxid"
    assert ev.category is Category.NVLINK_INTERCONNECT
    assert ev.xid is None  # an SXid is not a GPU XID
    assert ev.field_value("sxid") == str(sxid)
    assert (ev.severity, ev.action) == (severity, action)
    assert ev.host == "node7"


def test_non_fatal_sxid_report_is_not_escalated_by_its_data_lines(tmp_path: Path) -> None:
    # The driver prints each SXid as three lines; only the middle one names the severity.
    # The "Data {...}" and "Severity 0 ..." companions must not turn a non-fatal report into a
    # fatal, reboot-the-node incident.
    log = tmp_path / "dmesg.log"
    log.write_text(
        "[   38.183583] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002c, "
        "0x0000002c, 0x00000000, 0x0000002c, 0x80005302, 0x00000000, 0x00000000, 0x00000000}\n"
        "[   38.187830] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 45 "
        "Minion Link DLREQ interrupt\n"
        "[   38.189818] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine "
        "instance 45 Sub-engine instance 00\n")
    events, _ = scan_paths([str(log)], load_rules())
    assert events
    assert all(e.signature == "nvswitch_sxid" for e in events)
    assert [e for e in events if e.severity is Severity.FATAL] == []


# --- fallen off the bus ------------------------------------------------------------------------


def test_multiline_fallen_off_the_bus_report_is_one_xid_79_event(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text(
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
        "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n")

    events, stats = scan_paths([str(log)], load_rules())

    assert stats.warnings == []
    assert len(events) == 1
    ev = events[0]
    assert ev.category is Category.GPU_HARDWARE
    assert ev.xid == 79
    assert ev.gpu_pci == "0000:b3:00.0"
    assert ev.signature == "xid_fallen_off_bus"
    assert ev.evidence[0].line_no == 1


def test_single_line_fallen_off_the_bus_report() -> None:
    m = parse_xid_line("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    assert m is not None
    assert (m.xid, m.pci, m.inferred) == (79, "0000:3b:00.0", True)


def test_xid_79_line_beats_its_fallen_off_the_bus_companion(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(
        "May  1 10:00:00 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.\n"
        "May  1 10:00:00 node2 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n")
    rules = load_rules()
    events, _ = scan_paths([str(log)], rules)
    incidents = correlate(events, rules)
    assert len(incidents) == 1
    assert incidents[0].root_cause.signature == "xid"
    assert incidents[0].event_count == 1
    assert len(incidents[0].root_cause.evidence) == 2


# --- normalize_pci -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0000:3b:00", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("00000000:3B:00", "0000:3b:00.0"),
        ("0000:3b:00.1", "0000:3b:00.1"),
        ("0018:01:00", "0018:01:00.0"),
    ],
)
def test_normalize_pci(raw: str, expected: str) -> None:
    assert normalize_pci(raw) == expected


@pytest.mark.parametrize(("raw", "want"), [("3b:00.0", "0000:3b:00.0"),
                                           ("0000:3B:00:", "0000:3b:00.0")])
def test_normalize_pci_short_and_trailing_colon(raw: str, want: str) -> None:
    assert normalize_pci(raw) == want


def test_unknown_pid_and_name_are_not_kept_as_values() -> None:
    ev = _classify("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                   "fallen off the bus.")
    assert ev.field_value("pid") is None
    assert ev.field_value("process") is None
