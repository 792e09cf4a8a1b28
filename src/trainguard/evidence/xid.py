"""NVIDIA XIDs: the catalog, the mapping to our taxonomy, and parsing of NVRM/NVSwitch lines.

The catalog (``data/xid_catalog.csv``, see ``data/XID_SOURCE.md``) gives each XID the driver's
name, NVIDIA's immediate action and whether it is fatal. We map that to a failure category and an
action in two steps:

1. field knowledge for the XIDs that matter most in training fleets (memory/ECC, NVLink, GSP,
   application-caused XIDs 13/31/43/45), from the catalog's notes and published operations;
2. otherwise NVIDIA's immediate action decides (RESTART_BM -> reboot the node, RESET_GPU ->
   reset the GPU, RESTART_APP -> restart the job, IGNORE -> informational).

An XID that is not in the catalog (a newer driver's, or a typo) is *unknown: investigate*: a GPU
report of category ``gpu_hardware`` with severity ``non-fatal`` and action ``none``. Nothing
says it is fatal, so on its own it neither drains a node nor stops a job; it shows in incidents
for a person to look up (`xid_info(...).in_catalog` is False).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from trainguard.errors import ConfigError
from trainguard.taxonomy import Action, Category, Severity


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One catalog entry plus what trainguard makes of it."""

    xid: int
    name: str
    nvidia_action: str
    nvidia_fatal: bool
    category: Category
    action: Action
    severity: Severity
    advice: str
    in_catalog: bool = True
    """False for an XID the shipped catalog does not list (see the module docstring)."""


CATALOG_SOURCE = ("NVIDIA's XID catalog as mirrored in NVIDIA/NVSentinel "
                  "(gpu-health-monitor/xiderrorsmapping.csv)")
"""Where ``data/xid_catalog.csv`` comes from (``data/XID_SOURCE.md``)."""


_MEMORY_XIDS = frozenset({48, 63, 64, 92, 94, 95, 140, 156, 157})
_NVLINK_XIDS = frozenset({74, *range(144, 151), 155})
_APP_XIDS = frozenset({8, 11, 13, 31, 32, 43, 45, 68, 69})
# 13 (graphics engine exception) and 31 (MMU fault) are bad addresses in the application's own
# kernels: restarting reproduces them, the code (or the library it calls) needs fixing.
APP_FAULT_XIDS = frozenset({13, 31})
# XIDs the driver logs *because* something else already failed (a killed context, a reset
# channel): consequences that must not outrank the real cause in an incident.
CONSEQUENCE_XIDS = frozenset({43, 45})


def is_consequence(xid: int | None, caused_by: int | None) -> bool:
    """An XID that only reports an earlier failure and names no primary XID worth more."""
    return xid in CONSEQUENCE_XIDS and (caused_by is None or caused_by in CONSEQUENCE_XIDS)
_GSP_XIDS = frozenset({119, 120, 62, 143, 158})

_ACTION_FROM_NVIDIA: dict[str, Action] = {
    "RESTART_BM": Action.REBOOT_NODE,
    "RESTART_VM": Action.REBOOT_NODE,
    "RESET_GPU": Action.RESET_GPU,
    "RESTART_APP": Action.RESTART_JOB,
    "IGNORE": Action.NONE,
    "UNEXPECTED_ERR_REPORT_ISSUE": Action.RESET_GPU,
    "CHECK_MECHANICALS": Action.EXCLUDE_NODE,
    "UPDATE_SWFW": Action.FIX_CONFIG,
    "CHECK_UVM": Action.RESTART_JOB,
    "WORKFLOW_XID_48": Action.RESET_GPU,
    "WORKFLOW_XID_45": Action.NONE,
    "WORKFLOW_NVLINK_ERR": Action.REBOOT_NODE,
    "WORKFLOW_NVLINK5_ERR": Action.REBOOT_NODE,
    "FOLLOW_ACTION_IN_MESSAGE": Action.NONE,
}

_ADVICE: dict[Action, str] = {
    Action.REBOOT_NODE: "Drain the node and reboot (power-cycle) it; if the XID recurs after the "
    "reboot, send the GPU/node for hardware repair. Resume the job elsewhere from its last "
    "checkpoint.",
    Action.RESET_GPU: "Stop work on this GPU and reset it (nvidia-smi -r, or reboot the node); "
    "check row-remapping / retired pages; repeated occurrences mean a hardware RMA.",
    Action.RESTART_JOB: "Usually caused by the application: restart the job. If it repeats on the "
    "same GPU with different jobs, treat it as hardware.",
    Action.EXCLUDE_NODE: "Exclude the node from scheduling and have it inspected.",
    Action.FIX_CODE: "Almost always the application's own fault (a bad address in a kernel): fix "
    "the code or the library version; restarting repeats it. If different jobs hit it on the "
    "same GPU, treat it as hardware.",
    Action.FIX_CONFIG: "Update the driver/firmware or fix the configuration named in the message.",
    Action.NONE: "Informational or a consequence of an earlier XID: look for the primary error.",
}


def _classify(xid: int, nvidia_action: str, fatal: bool) -> tuple[Category, Action, Severity]:
    severity = Severity.FATAL if fatal else Severity.NON_FATAL
    action = _ACTION_FROM_NVIDIA.get(nvidia_action, Action.RESET_GPU if fatal else Action.NONE)
    if nvidia_action == "IGNORE":
        severity = Severity.INFO
    if xid in _MEMORY_XIDS:
        return Category.GPU_MEMORY_ECC, action, severity
    if xid in _NVLINK_XIDS:
        return Category.NVLINK_INTERCONNECT, action, severity
    if xid in _APP_XIDS:
        # 13/31/43/45 are most often the application's own fault (bad address, killed context).
        if xid in APP_FAULT_XIDS:
            action = Action.FIX_CODE
        return Category.CUDA_SOFTWARE_BUG, action, severity
    if xid not in _GSP_XIDS and nvidia_action in ("RESTART_APP", "CHECK_UVM"):
        return Category.CUDA_SOFTWARE_BUG, action, severity
    return Category.GPU_HARDWARE, action, severity


@cache
def xid_catalog() -> dict[int, XidInfo]:
    """The packaged catalog, keyed by XID number."""
    text = resources.files("trainguard.evidence").joinpath("data/xid_catalog.csv").read_text()
    out: dict[int, XidInfo] = {}
    for row in csv.DictReader(text.splitlines()):
        try:
            xid = int(row["xid"])
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"xid_catalog.csv: bad row {row!r}") from exc
        fatal = row["severity"].strip().upper() == "FATAL"
        nv_action = row["immediate_action"].strip()
        category, action, severity = _classify(xid, nv_action, fatal)
        out[xid] = XidInfo(xid, row["name"].strip(), nv_action, fatal, category, action,
                           severity, _ADVICE.get(action, ""))
    return out


def catalog_description() -> str:
    """What the shipped catalog is: its source and the XIDs it covers."""
    known = sorted(xid_catalog())
    span = f"XIDs {known[0]}-{known[-1]}" if known else "no XIDs"
    return f"{CATALOG_SOURCE}: {len(known)} entries, {span}"


def xid_info(xid: int) -> XidInfo:
    """Catalog entry for ``xid``; an XID the catalog does not list is *unknown: investigate*
    (non-fatal, no action of its own: nothing says what it means)."""
    info = xid_catalog().get(xid)
    if info is not None:
        return info
    return XidInfo(xid, "UNKNOWN_XID", "UNKNOWN", False, Category.GPU_HARDWARE, Action.NONE,
                   Severity.NON_FATAL, f"XID {xid} is not in trainguard's XID catalog "
                   f"({catalog_description()}). Unknown: investigate: look it up in NVIDIA's "
                   "XID documentation for your driver version. Trainguard treats it as "
                   "non-fatal: on its own it does not drain the node or stop the job.",
                   in_catalog=False)


# --- line parsing ------------------------------------------------------------------------------

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
# Variants: ".0" function suffix, no "PCI:" prefix, pid='<unknown>', no pid/name at all.
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)]{0,40})\): *(?P<xid>\d+)(?:,(?P<msg>.*))?")
# Other tools quote the XID: k8s-device-plugin "XidCriticalError: Xid=94 on Device=GPU-...",
# DCGM / health checkers "Xid=79", "XID error 79".
XID_OTHER = re.compile(
    r"\bXid=(?P<xid>\d+)(?: on Device=(?P<dev>\S+?);?(?:\s|$))?"
    r"|\bXID (?:error|Error) (?P<xid2>\d+)")
_PCI_OK = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?$")
_PID = re.compile(r"^\s*pid=(?P<pid>'?<?[\w]*>?'?|\d+)\s*(?:,\s*name=(?P<name>[^,]*))?,?\s*")
_PREVIOUS = re.compile(r"(?:caused by|due to) previous Xid[ :]*(?P<prev>\d+)", re.IGNORECASE)
_RECOVERY = re.compile(
    r"recovery action changed from 0x[0-9a-f]+ \((?P<old>[^)]*)\)"
    r" to 0x[0-9a-f]+ \((?P<new>[^)]*)\)",
    re.IGNORECASE)
SXID_LINE = re.compile(
    r"nvidia-nvswitch(?P<sw>\d+): SXid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): *(?P<sxid>\d+),"
    r" *(?P<sev>Non-fatal|Fatal)?,?\s*(?P<msg>.*)", re.IGNORECASE)
# The multi-line fallen-off-the-bus report carries no Xid number.
FALLEN_OFF = re.compile(
    r"(?:GPU (?P<pci1>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?): GPU"
    r"|The NVIDIA GPU (?P<pci2>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"\s*(?:NVRM:\s*)?(?:\(PCI ID: [0-9a-fA-F:]+\))?\s*installed in this system)"
    r"\s*(?:NVRM:\s*)?has\s*(?:NVRM:\s*)?fallen off the bus"
    r"|NVRM: (?:GPU has )?fallen off the bus")
# The driver splits this report over several lines; the scanner joins them before matching.
FALLEN_OFF_START = "The NVIDIA GPU"
GPU_UUID_LINE = re.compile(
    r"NVRM: GPU at PCI:(?P<pci>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9a-f-]{36})")


def normalize_pci(pci: str) -> str:
    """``0000:3b:00`` and ``00000000:3B:00.0`` both become ``0000:3b:00.0``."""
    pci = pci.lower().rstrip(":")
    if pci.count(":") == 1:  # lspci's short form "3b:00.0" has no PCI domain
        pci = "0000:" + pci
    dom, _, rest = pci.partition(":")
    if len(dom) > 4:
        dom = dom[-4:]
    if "." not in rest:
        rest += ".0"
    return f"{dom}:{rest}"


@dataclass(frozen=True, slots=True)
class XidMatch:
    """What one NVRM Xid / SXid / fallen-off-the-bus line says."""

    xid: int
    pci: str
    message: str
    pid: str | None = None
    process: str | None = None
    caused_by: int | None = None
    recovery_action: str | None = None
    switch: bool = False
    switch_fatal: bool | None = None
    inferred: bool = False


def parse_xid_line(line: str) -> XidMatch | None:
    """Parse one line; ``None`` when it is not an XID report."""
    if m := XID_LINE.search(line):
        pci_text = m.group("pci").strip()
        pci = normalize_pci(pci_text) if _PCI_OK.match(pci_text) else ""
        msg = (m.group("msg") or "").strip()
        pid = name = None
        if pm := _PID.match(msg):
            pid, name = pm.group("pid").strip("'"), (pm.group("name") or "").strip() or None
            msg = msg[pm.end():].strip()
        prev = _PREVIOUS.search(msg)
        rec = _RECOVERY.search(msg)
        return XidMatch(int(m.group("xid")), pci, msg, pid, name,
                        int(prev.group("prev")) if prev else None,
                        rec.group("new").strip() if rec else None)
    if s := SXID_LINE.search(line):
        sev = (s.group("sev") or "").lower()
        return XidMatch(int(s.group("sxid")), normalize_pci(s.group("pci")),
                        s.group("msg").strip(), switch=True,
                        switch_fatal=None if not sev else sev == "fatal")
    if f := FALLEN_OFF.search(line):
        pci = f.group("pci1") or f.group("pci2")
        return XidMatch(79, normalize_pci(pci) if pci else "", "GPU has fallen off the bus",
                        inferred=True)
    if o := XID_OTHER.search(line):
        return XidMatch(int(o.group("xid") or o.group("xid2")), "", line.strip()[:200],
                        process=o.group("dev"))
    return None


def recovery_action_to_action(text: str) -> tuple[Action, Severity]:
    """XID 154's 'recovery action changed to X' names what the driver needs."""
    t = text.lower()
    if "reboot" in t:
        return Action.REBOOT_NODE, Severity.FATAL
    if "reset" in t:
        return Action.RESET_GPU, Severity.FATAL
    if "drain" in t:
        return Action.EXCLUDE_NODE, Severity.FATAL
    return Action.NONE, Severity.INFO


__all__ = [
    "APP_FAULT_XIDS",
    "CATALOG_SOURCE",
    "CONSEQUENCE_XIDS",
    "XidInfo",
    "XidMatch",
    "catalog_description",
    "is_consequence",
    "normalize_pci",
    "parse_xid_line",
    "recovery_action_to_action",
    "xid_catalog",
    "xid_info",
]
