"""Ground truth for backtests: when and where hardware failed, and what must not count against us.

Three sources, one result (:class:`GroundTruth`):

- a JSONL file written by hand or by the simulator (:func:`truth_from_jsonl`);
- the DCGM XID gauge in the telemetry itself (:func:`truth_from_xid_gauge`);
- kernel logs with NVRM XID lines (:func:`read_kernel_log_truth`). Syslog lines carry no year
  (``Nov 18 03:12:01 host kernel: NVRM: Xid ...``): it is given (``year``), else guessed from
  each file's modification time, and the result says how many lines were guessed.

Application XIDs (13/31 are bad addresses in the job's own kernels, 43/45 report a context that
was already killed) are not hardware failures: they become :class:`AppXid` records, which the
scorecard uses to charge alerts raised *because of* them as false positives. XIDs on one node
less than 30 min apart are one failure (the driver repeats itself, and a 79 is followed by 45s).

    >>> gt = GroundTruth(failures=(Failure("n1", 1000.0, 79),))
    >>> gt.failures[0].failure_type
    'xid79'
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from trainguard.errors import ConfigError
from trainguard.evidence.xid import APP_FAULT_XIDS, CONSEQUENCE_XIDS, xid_info
from trainguard.telemetry.frame import Telemetry
from trainguard.telemetry.identity import strip_port
from trainguard.timeparse import check_year, parse_timestamp

__all__ = [
    "APP_XIDS",
    "MERGE_WINDOW_S",
    "AppXid",
    "BenignWindow",
    "Failure",
    "GroundTruth",
    "KernelLogTruth",
    "is_app_xid",
    "read_kernel_log_truth",
    "truth_from_jsonl",
    "truth_from_kernel_logs",
    "truth_from_xid_gauge",
]

log = logging.getLogger(__name__)

APP_XIDS = APP_FAULT_XIDS | CONSEQUENCE_XIDS
"""XIDs caused by the application (or reporting an earlier failure), not by the hardware."""
MERGE_WINDOW_S = 30 * 60.0
"""XIDs on one node less than this apart belong to one failure."""

_NODE_KEYS = ("node", "host", "hostname")
_TIME_KEYS = ("time", "t", "timestamp", "t_xid")
_ALIAS_KEYS = ("host", "hostname", "instance", "ip", "address", "nodename")
# Only planned work excuses an alert. Records of type "benign" (look-alike anomalies a simulator
# plants: a thermal spike, one correctable error) are exactly what a detector must NOT page on,
# so they are skipped (counted in `ignored`) and alerts on them count as false positives.
_BENIGN_TYPES = frozenset({"maintenance"})


@dataclass(frozen=True, slots=True)
class Failure:
    """A hardware failure on `node` at `time` (unix s): the moment the XID was reported."""

    node: str
    time: float
    xid: int | None = None
    gpu: str | None = None
    failure_type: str = ""
    """Category for the scorecard (e.g. `xid79`, `dbe`, `nvlink`); default `xid<N>`."""
    source: str = ""
    """Where the record came from: `jsonl`, `xid_gauge`, `kernel_log`."""

    def __post_init__(self) -> None:
        if not self.failure_type:
            object.__setattr__(self, "failure_type",
                               f"xid{self.xid}" if self.xid is not None else "unknown")


@dataclass(frozen=True, slots=True)
class BenignWindow:
    """Known non-failure activity (maintenance, burn-in) on `node` from `start` to `end`."""

    node: str
    start: float
    end: float
    what: str = "maintenance"


@dataclass(frozen=True, slots=True)
class AppXid:
    """An application-caused XID: alerts at it are false positives."""

    node: str
    time: float
    xid: int


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """Everything a backtest is scored against."""

    failures: tuple[Failure, ...] = ()
    benign: tuple[BenignWindow, ...] = ()
    app_xids: tuple[AppXid, ...] = ()
    ignored: int = 0
    """Records the loader skipped (unknown `type`)."""
    aliases: tuple[tuple[str, str], ...] = ()
    """(node, other name) pairs seen in the records: `instance`/`ip` next to a hostname."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "failures": [{"node": f.node, "time": f.time, "xid": f.xid, "gpu": f.gpu,
                          "failure_type": f.failure_type, "source": f.source}
                         for f in self.failures],
            "benign": [{"node": b.node, "start": b.start, "end": b.end, "what": b.what}
                       for b in self.benign],
            "app_xids": [{"node": a.node, "time": a.time, "xid": a.xid} for a in self.app_xids],
            "ignored": self.ignored,
        }


def is_app_xid(xid: int) -> bool:
    """True for XIDs the application causes (13, 31) or that report an earlier failure (43, 45)."""
    return xid in APP_XIDS


# --- JSONL ------------------------------------------------------------------------------------


def _parse_time(value: Any, where: str, key: str) -> float:
    return parse_timestamp(value, f"{where}: {key}")


def _first(rec: dict[str, Any], keys: Sequence[str]) -> tuple[str, Any] | None:
    for k in keys:
        if rec.get(k) is not None:
            return k, rec[k]
    return None


def _node(rec: dict[str, Any], where: str) -> str:
    found = _first(rec, _NODE_KEYS)
    if found is None or not isinstance(found[1], str) or not found[1]:
        raise ConfigError(f"{where}: needs a node name (node, host or hostname)")
    return found[1]


def _xid(rec: dict[str, Any], where: str) -> int | None:
    raw = rec.get("xid")
    if raw is None:
        return None
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError(raw)
        return int(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: xid must be an integer, got {raw!r}") from exc


def truth_from_jsonl(path: str | Path) -> GroundTruth:
    """Read ground truth from JSON lines (see the module docstring for the accepted keys).

    Each line is an object: `node`|`host`|`hostname`; `time`|`t`|`timestamp`|`t_xid` (unix seconds
    or ISO-8601, naive = UTC); `xid`; `type` one of failure/app_xid/maintenance (without a
    type, a record with an XID is a failure, or an app_xid for XIDs 13/31/43/45); `failure_type`
    (default `xid<N>`); `gpu`; maintenance windows use `start`/`end`. Blank lines and lines
    starting with `#` are skipped; other types (including `benign` look-alikes, which excuse no
    alert) are counted in `ignored`.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read ground truth: {exc}") from exc
    failures: list[Failure] = []
    benign: list[BenignWindow] = []
    app: list[AppXid] = []
    ignored: dict[str, int] = {}
    aliases: set[tuple[str, str]] = set()
    for line_no, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{p}:{line_no}"
        try:
            rec = json.loads(s)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(rec, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        kind = rec.get("type")
        xid = _xid(rec, where)
        if kind is None:
            if xid is None:
                raise ConfigError(f"{where}: record has neither a type nor an xid")
            kind = "app_xid" if is_app_xid(xid) else "failure"
        if not isinstance(kind, str):
            raise ConfigError(f"{where}: type must be a string, got {kind!r}")
        kind = kind.strip().lower()
        first = _first(rec, _NODE_KEYS)
        if first is not None and isinstance(first[1], str):
            for key in _ALIAS_KEYS:
                other = rec.get(key)
                if isinstance(other, str) and other and other != first[1]:
                    aliases.add((first[1], strip_port(other)))
        if kind in _BENIGN_TYPES:
            node = _node(rec, where)
            if rec.get("start") is None or rec.get("end") is None:
                raise ConfigError(f"{where}: a {kind} window needs start and end")
            start = _parse_time(rec["start"], where, "start")
            end = _parse_time(rec["end"], where, "end")
            if end < start:
                raise ConfigError(f"{where}: end is before start")
            what = rec.get("what") or rec.get("reason") or kind
            benign.append(BenignWindow(node, start, end, str(what)))
        elif kind in ("failure", "app_xid"):
            node = _node(rec, where)
            found = _first(rec, _TIME_KEYS)
            if found is None:
                raise ConfigError(f"{where}: needs a time (time, t, timestamp or t_xid)")
            t = _parse_time(found[1], where, found[0])
            if kind == "app_xid":
                if xid is None:
                    raise ConfigError(f"{where}: an app_xid record needs an xid")
                app.append(AppXid(node, t, xid))
            else:
                gpu = rec.get("gpu")
                ftype = rec.get("failure_type")
                failures.append(Failure(node, t, xid, None if gpu is None else str(gpu),
                                        str(ftype) if ftype else "", "jsonl"))
        else:
            ignored[kind] = ignored.get(kind, 0) + 1
    if ignored:
        log.info("%s: ignored records of unknown type: %s", p,
                    ", ".join(f"{k} x{n}" for k, n in sorted(ignored.items())))
    return GroundTruth(tuple(sorted(failures, key=lambda f: (f.time, f.node))),
                       tuple(sorted(benign, key=lambda b: (b.start, b.node))),
                       tuple(sorted(app, key=lambda a: (a.time, a.node))),
                       sum(ignored.values()), tuple(sorted(aliases)))


def align_nodes(truth: GroundTruth, nodes: Sequence[str]) -> tuple[GroundTruth, int]:
    """Rename truth nodes the telemetry does not know to an alias it does know.

    Ground truth often names hosts (`gpu-a07`) while telemetry names scrape targets
    (`instance="10.0.3.7:9400"`); records that carry both let the two be joined. Returns the
    aligned truth and how many node names were renamed.
    """
    known = set(nodes)
    rename: dict[str, str] = {}
    for name, alias in truth.aliases:
        if name not in known and alias in known:
            rename.setdefault(name, alias)
    if not rename:
        return truth, 0

    def r(n: str) -> str:
        return rename.get(n, n)

    return GroundTruth(
        tuple(replace(f, node=r(f.node)) for f in truth.failures),
        tuple(replace(b, node=r(b.node)) for b in truth.benign),
        tuple(replace(a, node=r(a.node)) for a in truth.app_xids),
        truth.ignored, truth.aliases), len(rename)


# --- XID events -> failures -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _XidEvent:
    node: str
    time: float
    xid: int
    gpu: str | None


@dataclass(slots=True)
class _NodeState:
    last_failure_xid_t: float = -math.inf
    failures: list[Failure] = field(default_factory=list)


def _events_to_truth(events: Iterable[_XidEvent], source: str) -> GroundTruth:
    """Apply the app-XID split and the 30-min merge to time-ordered XID events.

    1. an XID less than `MERGE_WINDOW_S` after the node's previous hardware XID extends that
       failure (consequence XIDs 43/45 included: they report the failure we already have);
    2. otherwise an application XID becomes an `AppXid`;
    3. otherwise it starts a new failure.
    """
    nodes: dict[str, _NodeState] = {}
    app: list[AppXid] = []
    for ev in sorted(events, key=lambda e: (e.time, e.node, e.xid)):
        st = nodes.setdefault(ev.node, _NodeState())
        if ev.time - st.last_failure_xid_t < MERGE_WINDOW_S and (
                ev.xid in CONSEQUENCE_XIDS or not is_app_xid(ev.xid)):
            st.last_failure_xid_t = ev.time
            continue
        if is_app_xid(ev.xid):
            app.append(AppXid(ev.node, ev.time, ev.xid))
            continue
        st.last_failure_xid_t = ev.time
        st.failures.append(Failure(ev.node, ev.time, ev.xid, ev.gpu, "", source))
    failures = sorted((f for st in nodes.values() for f in st.failures),
                      key=lambda f: (f.time, f.node))
    return GroundTruth(tuple(failures), (), tuple(app))


def _gauge_events(tel: Telemetry) -> list[_XidEvent]:
    events: list[_XidEvent] = []
    for m in tel.metrics:
        if "XID_ERRORS" not in m.name.upper():
            continue
        for i, ent in enumerate(m.entities):
            row = m.values[i]
            idx = np.flatnonzero(~np.isnan(row))
            if idx.size == 0:
                continue
            vals = row[idx]
            # A change to a non-zero value; the first sample counts only if already non-zero
            # (the XID happened at or before the start of the data: report it there).
            prev = np.concatenate(([0.0], vals[:-1]))
            hits = idx[(vals != prev) & (vals != 0)]
            for j in hits:
                events.append(_XidEvent(ent.node, float(tel.times[j]), int(row[j]), ent.gpu))
    return events


def truth_from_xid_gauge(tel: Telemetry) -> GroundTruth:
    """Failures from dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS` (a gauge holding the last XID).

    Every change of a GPU's value to a non-zero XID is an event (missing samples are skipped, so a
    GPU that stops reporting and comes back with the same value is not a new XID). Events then go
    through the app-XID split and 30-min merge. Every metric whose name contains `XID_ERRORS` is
    read. Failures are typed `xid<N>`.
    """
    truth = _events_to_truth(_gauge_events(tel), "xid_gauge")
    for f in truth.failures:
        if f.xid is not None:
            log.debug("xid gauge: %s %s at %.0f (%s)", f.node, f.xid, f.time,
                      xid_info(f.xid).name)
    return truth


_YEARLESS = re.compile(
    r"^(?:<\d{1,3}>)?(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
    r"\d\d:\d\d:\d\d")
"""An RFC 3164 / journalctl-short prefix: month, day and time, but no year."""


@dataclass(frozen=True, slots=True)
class KernelLogTruth:
    """Failures from kernel logs, and how far their times rest on a guessed year."""

    truth: GroundTruth
    yearless: int = 0
    """XID lines whose time carries no year (syslog)."""
    year: int | None = None
    """The year given for them; None: guessed (see `year_note`)."""
    guessed_years: tuple[int, ...] = ()
    """The years the guess produced for yearless lines (UTC)."""

    @property
    def year_note(self) -> str | None:
        """One line saying how the year was guessed; None when no year had to be guessed."""
        if not self.yearless or self.year is not None:
            return None
        years = ", ".join(map(str, self.guessed_years))
        return (f"kernel logs: {self.yearless} XID line(s) carry no year (syslog "
                f"'Nov 18 03:12:01 host kernel: ...'); guessed {years} from each log file's "
                "modification time (a date later than that time is taken from the year "
                "before). Give --year YYYY if the logs are from another year")


def read_kernel_log_truth(paths: Sequence[str | Path], *, year: int | None = None,
                          host_from_path: bool = True) -> KernelLogTruth:
    """Failures from NVRM XID lines in kernel logs (files, directories, `.gz`).

    The host comes from the line's syslog prefix, else (with `host_from_path`) from the file name
    or its directory (`node17.log`, `node17/kern.log`). Lines without a year take `year`, else
    the year of the file's modification time. Events without an absolute time or host are
    skipped (logged at warning level with a count).
    """
    from trainguard.evidence import ScanOptions, TimeKind, load_rules, scan_paths

    if year is not None:
        check_year(year, "--year")
    opts = ScanOptions(host_from_path=host_from_path, default_year=year)
    found, stats = scan_paths([str(p) for p in paths], load_rules([]), opts)
    for w in stats.warnings:
        log.warning("%s: %s", w.path, w.message)
    if stats.files_read == 0:
        raise ConfigError("no kernel log could be read: " + ", ".join(str(p) for p in paths))
    events: list[_XidEvent] = []
    skipped = 0
    yearless: list[float] = []
    for ev in found:
        if ev.xid is None:
            continue
        if ev.time is None or ev.time_kind is not TimeKind.ABSOLUTE or not ev.host:
            skipped += 1
            continue
        if ev.evidence and _YEARLESS.match(ev.evidence[0].text):
            yearless.append(ev.time)
        gpu = (str(ev.gpu_index) if ev.gpu_index is not None else ev.gpu_pci)
        events.append(_XidEvent(ev.host, ev.time, ev.xid, gpu))
    if skipped:
        log.warning("kernel logs: %d XID event(s) without an absolute time or host skipped",
                    skipped)
    guessed = tuple(sorted({datetime.fromtimestamp(t, UTC).year for t in yearless}))
    return KernelLogTruth(_events_to_truth(events, "kernel_log"), len(yearless), year,
                          () if year is not None else guessed)


def truth_from_kernel_logs(paths: Sequence[str | Path], *, host_from_path: bool = True,
                           default_year: int | None = None) -> GroundTruth:
    """`read_kernel_log_truth(...).truth`; a guessed year is logged at warning level."""
    found = read_kernel_log_truth(paths, year=default_year, host_from_path=host_from_path)
    if found.year_note is not None:
        log.warning("%s", found.year_note)
    return found.truth
