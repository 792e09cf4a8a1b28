"""Checkpoint saves and loads in node-exporter telemetry: when, how many bytes, how fast, and how
much of each node's link they used (the operational report's Analysis 2).

Saves are bursts of NFS writes, loads bursts of NFS reads, found per node by `phases.find_phases`.
The byte counters, first one present wins (per direction; summed over NFS mounts):

1. `node_mountstats_nfs_total_write_bytes_total` / `..._total_read_bytes_total` (bytes the NFS
   client wrote to / read from the server);
2. `node_mountstats_nfs_operations_sent_bytes_total{operation="WRITE"}` /
   `..._received_bytes_total{operation="READ"}` (RPC payload plus headers);
3. with `net_device`: `node_network_transmit_bytes_total{device=...}` /
   `node_network_receive_bytes_total{device=...}` (all traffic of that interface).

Per phase (times in unix seconds; the phase covers (first active sample - step, last]):

- per node: its active span inside the phase, bytes = sum(rate * step) over it, mean = bytes /
  span, peak = highest sample rate; utilization = 8 * bandwidth / (link_gbps * 1e9), in percent;
- aggregate: bytes = sum over nodes, mean = bytes / phase duration, peak = highest sum of the
  nodes' rates at one sample;
- queue share = sum of `node_mountstats_nfs_operations_queue_time_seconds_total` over the
  phase's nodes and samples / the same sum of `..._request_time_seconds_total` (enqueue to
  completion), for operation WRITE (saves) or READ (loads); without request time, queue time
  + `..._response_time_seconds_total` is the denominator. At or above `queue_hint_share` the
  time went to waiting for an RPC slot on the client, not to the wire or the server.

    >>> result = analyze(tel, AnalyzeConfig(link_gbps=200))   # doctest: +SKIP
    >>> result.summary.save_util_min_pct, result.summary.save_util_max_pct  # doctest: +SKIP
    (1.4, 10.4)
"""

from __future__ import annotations

import fnmatch
import logging
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from trainguard.ckpt.phases import PhaseConfig, RawPhase, fill_gaps, find_phases
from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry.frame import FloatArray, MetricSeries, Telemetry
from trainguard.telemetry.identity import render_key
from trainguard.telemetry.openmetrics import parse_series_text
from trainguard.telemetry.rates import to_rates

__all__ = [
    "NET_RECEIVE",
    "NET_TRANSMIT",
    "OP_QUEUE_TIME",
    "OP_RECEIVED_BYTES",
    "OP_REQUEST_TIME",
    "OP_RESPONSE_TIME",
    "OP_SENT_BYTES",
    "READ_BYTES",
    "WRITE_BYTES",
    "AnalysisSummary",
    "AnalyzeConfig",
    "CheckpointAnalysis",
    "NodeTransfer",
    "Phase",
    "PhaseKind",
    "Selector",
    "analyze",
    "byte_sources",
    "prometheus_selectors",
    "utilization_pct",
]

log = logging.getLogger(__name__)

WRITE_BYTES = "node_mountstats_nfs_total_write_bytes_total"
READ_BYTES = "node_mountstats_nfs_total_read_bytes_total"
OP_SENT_BYTES = "node_mountstats_nfs_operations_sent_bytes_total"
OP_RECEIVED_BYTES = "node_mountstats_nfs_operations_received_bytes_total"
OP_QUEUE_TIME = "node_mountstats_nfs_operations_queue_time_seconds_total"
OP_RESPONSE_TIME = "node_mountstats_nfs_operations_response_time_seconds_total"
OP_REQUEST_TIME = "node_mountstats_nfs_operations_request_time_seconds_total"
NET_TRANSMIT = "node_network_transmit_bytes_total"
NET_RECEIVE = "node_network_receive_bytes_total"

_NFS_DIAGNOSE = "check `trainguard nfs diagnose`"


class PhaseKind(StrEnum):
    """Which way the bytes went."""

    SAVE = "save"
    """NFS writes (checkpoint save)."""
    LOAD = "load"
    """NFS reads (checkpoint load, e.g. at job start)."""

    @property
    def operation(self) -> str:
        """The NFS operation (mountstats `operation` label) that carries the data."""
        return "WRITE" if self is PhaseKind.SAVE else "READ"


@dataclass(frozen=True, slots=True)
class Selector:
    """A metric name and the label values its series must have.

        >>> str(Selector(OP_SENT_BYTES, (("operation", "WRITE"),)))
        'node_mountstats_nfs_operations_sent_bytes_total{operation="WRITE"}'
    """

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return render_key(self.name, self.labels)


def byte_sources(kind: PhaseKind, net_device: str | None = None) -> tuple[Selector, ...]:
    """The byte counters tried for `kind`, in order of preference."""
    op = (("operation", kind.operation),)
    if kind is PhaseKind.SAVE:
        found = [Selector(WRITE_BYTES), Selector(OP_SENT_BYTES, op)]
        net = NET_TRANSMIT
    else:
        found = [Selector(READ_BYTES), Selector(OP_RECEIVED_BYTES, op)]
        net = NET_RECEIVE
    if net_device:
        found.append(Selector(net, (("device", net_device),)))
    return tuple(found)


def prometheus_selectors(net_device: str | None = None) -> list[str]:
    """PromQL selectors that fetch everything `analyze` may use (one range query each).

    The network counters are fetched for every device and the per-operation ones for READ and
    WRITE together: a label with a single value is dropped by the telemetry reader, and the
    selection here needs it.
    """
    ops = '{operation=~"READ|WRITE"}'
    out = [WRITE_BYTES, READ_BYTES]
    out += [name + ops for name in (OP_SENT_BYTES, OP_RECEIVED_BYTES, OP_QUEUE_TIME,
                                    OP_RESPONSE_TIME, OP_REQUEST_TIME)]
    if net_device:
        out += [NET_TRANSMIT, NET_RECEIVE]
    return out


def utilization_pct(bytes_per_s: float, link_gbps: float) -> float:
    """Share of a link of `link_gbps` Gbit/s (decimal) used by `bytes_per_s`, in percent."""
    return 100.0 * 8.0 * bytes_per_s / (link_gbps * 1e9)


@dataclass(frozen=True, slots=True)
class AnalyzeConfig:
    """What `analyze` measures against and which nodes it looks at.

        >>> AnalyzeConfig(link_gbps=400).link_gbps
        400
    """

    link_gbps: float = 200.0
    """Each node's link bandwidth in Gbit/s (utilization is relative to it)."""
    net_device: str | None = None
    """Fall back to this interface's node_network_* byte counters when there are no NFS ones."""
    nodes: tuple[str, ...] = ()
    """Only nodes matching one of these shell patterns (`node0*`); empty = every node."""
    queue_hint_share: float = 0.5
    """Queue share at or above which a phase's hint blames client-side RPC queueing."""
    phases: PhaseConfig = field(default_factory=PhaseConfig)
    """How bursts are told from the baseline."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.link_gbps) or self.link_gbps <= 0:
            raise ConfigError(f"ckpt.analyze.link_gbps must be > 0 (got {self.link_gbps})")
        if not 0 <= self.queue_hint_share <= 1:
            raise ConfigError("ckpt.analyze.queue_hint_share must be between 0 and 1")
        if self.net_device is not None and not self.net_device:
            raise ConfigError("ckpt.analyze.net_device must be a non-empty interface name")
        if isinstance(self.nodes, str) or not all(isinstance(n, str) and n for n in self.nodes):
            raise ConfigError("ckpt.analyze.nodes must be a list of non-empty node patterns")


@dataclass(frozen=True, slots=True)
class NodeTransfer:
    """One node's part in a phase, over its own active span (unix seconds, (start, end])."""

    node: str
    start: float
    end: float
    nbytes: float
    mean_bps: float
    """Bytes per second over the node's active span."""
    peak_bps: float
    """Highest one-sample rate."""
    util_mean_pct: float
    util_peak_pct: float

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "start": self.start, "end": self.end,
                "bytes": round(self.nbytes), "mean_bps": round(self.mean_bps, 1),
                "peak_bps": round(self.peak_bps, 1),
                "util_mean_pct": round(self.util_mean_pct, 3),
                "util_peak_pct": round(self.util_peak_pct, 3)}


@dataclass(frozen=True, slots=True)
class Phase:
    """One checkpoint save or load across the nodes that took part (unix seconds)."""

    kind: PhaseKind
    start: float
    end: float
    nbytes: float
    """Bytes moved by the phase's nodes over their active spans."""
    mean_bps: float
    """Aggregate: bytes / duration."""
    peak_bps: float
    """Aggregate: highest sum of the nodes' rates at one sample."""
    node_mean_bps: float
    """Mean over nodes of each node's mean rate."""
    node_peak_bps: float
    """Highest one-sample rate of any node."""
    util_mean_pct: float
    """`node_mean_bps` as a share of one node's link."""
    util_peak_pct: float
    """`node_peak_bps` as a share of one node's link."""
    nodes: tuple[NodeTransfer, ...]
    queue_s: float | None = None
    """Seconds the phase's READ/WRITE RPCs spent queued on the clients (None: no metric)."""
    op_time_s: float | None = None
    """Seconds those RPCs took from enqueue to completion."""
    hint: str = ""

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes)

    @property
    def queue_share(self) -> float | None:
        if self.queue_s is None or not self.op_time_s:
            return None
        return self.queue_s / self.op_time_s

    def to_dict(self) -> dict[str, Any]:
        share = self.queue_share
        return {
            "kind": self.kind.value, "start": self.start, "end": self.end,
            "duration_s": self.duration_s, "bytes": round(self.nbytes),
            "mean_bps": round(self.mean_bps, 1), "peak_bps": round(self.peak_bps, 1),
            "node_mean_bps": round(self.node_mean_bps, 1),
            "node_peak_bps": round(self.node_peak_bps, 1),
            "util_mean_pct": round(self.util_mean_pct, 3),
            "util_peak_pct": round(self.util_peak_pct, 3),
            "queue_share": None if share is None else round(share, 4),
            "hint": self.hint, "nodes": [n.to_dict() for n in self.nodes],
        }


@dataclass(frozen=True, slots=True)
class AnalysisSummary:
    """The phases in a few numbers: the report's "saves used 1.4-10.4% of each node's link"."""

    saves: int
    loads: int
    median_save_s: float | None
    median_load_s: float | None
    save_bytes: float
    save_util_min_pct: float | None
    """Lowest mean utilization of any node in any save."""
    save_util_max_pct: float | None
    """Highest mean utilization of any node in any save."""
    save_queue_share: float | None
    """Queue time / WRITE time summed over every save (None: no per-operation timings)."""
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 3) -> float | None:
            return None if x is None else round(x, nd)

        return {"saves": self.saves, "loads": self.loads,
                "median_save_s": self.median_save_s, "median_load_s": self.median_load_s,
                "save_bytes": round(self.save_bytes),
                "save_util_min_pct": r(self.save_util_min_pct),
                "save_util_max_pct": r(self.save_util_max_pct),
                "save_queue_share": r(self.save_queue_share, 4), "hint": self.hint}


@dataclass(frozen=True, slots=True)
class CheckpointAnalysis:
    """Everything `analyze` found; `to_dict` is the `--json` output."""

    phases: tuple[Phase, ...]
    summary: AnalysisSummary
    link_gbps: float
    step_s: int
    start: float
    """First grid time analysed (unix seconds)."""
    end: float
    nodes: tuple[str, ...]
    """Nodes analysed (after the node filter)."""
    save_source: str | None
    """The byte counter saves were found in (None: none present)."""
    load_source: str | None

    @property
    def saves(self) -> tuple[Phase, ...]:
        return tuple(p for p in self.phases if p.kind is PhaseKind.SAVE)

    @property
    def loads(self) -> tuple[Phase, ...]:
        return tuple(p for p in self.phases if p.kind is PhaseKind.LOAD)

    def to_dict(self) -> dict[str, Any]:
        return {"link_gbps": self.link_gbps, "step_s": self.step_s, "start": self.start,
                "end": self.end, "nodes": list(self.nodes), "save_source": self.save_source,
                "load_source": self.load_source, "summary": self.summary.to_dict(),
                "phases": [p.to_dict() for p in self.phases]}


# -- selecting series ---------------------------------------------------------------------------


def _matching(tel: Telemetry, sel: Selector) -> list[MetricSeries]:
    """Series of `sel.name` whose key carries every label value of `sel` (one per NFS mount)."""
    out: list[MetricSeries] = []
    for m in tel.metrics:
        if not m.name.startswith(sel.name):
            continue
        name, labels = parse_series_text(m.name)
        if name == sel.name and all(labels.get(k) == v for k, v in sel.labels):
            out.append(m)
    return out


def _rate_matrix(tel: Telemetry, series: list[MetricSeries],
                 nodes: tuple[str, ...]) -> FloatArray:
    """Per node (rows in `nodes` order) the summed per-second rate of `series`; NaN where none
    of them reported. Counters become rates with reset handling (`telemetry.to_rates`)."""
    out = np.full((len(nodes), tel.times.size), np.nan)
    row = {n: i for i, n in enumerate(nodes)}
    rated = to_rates(Telemetry(tel.times, tel.step_s, tuple(series)))
    for m in rated.metrics:
        for entity, values in zip(m.entities, m.values, strict=True):
            i = row.get(entity.node)
            if i is None or entity.gpu is not None:
                continue
            cur = out[i]
            out[i] = np.where(np.isnan(cur), values, np.where(np.isnan(values), cur, cur + values))
    return out


def _nodes(tel: Telemetry, selectors: list[Selector], patterns: tuple[str, ...]
           ) -> tuple[str, ...]:
    found = sorted({e.node for sel in selectors for m in _matching(tel, sel)
                    for e in m.entities if e.gpu is None})
    if not patterns or not found:
        return tuple(found)
    chosen = tuple(n for n in found if any(fnmatch.fnmatchcase(n, p) for p in patterns))
    if not chosen:
        have = ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")
        raise ConfigError(f"ckpt.analyze.nodes: no node matches {', '.join(patterns)} "
                          f"(nodes with NFS/network byte counters: {have})")
    return chosen


def _missing_message(cfg: AnalyzeConfig, tel: Telemetry) -> str:
    tried = [str(s) for kind in PhaseKind for s in byte_sources(kind, cfg.net_device)]
    msg = f"no NFS byte counters found (looked for {', '.join(tried)})"
    if cfg.net_device is None:
        msg += "; give a network device (--net-device) to fall back to node_network_* counters"
    else:
        devices = sorted({parse_series_text(m.name)[1].get("device", "") for m in tel.metrics
                          if m.name.startswith(NET_TRANSMIT)} - {""})
        if devices:
            msg += f"; devices with node_network_* counters: {', '.join(devices)}"
    return msg


# -- measuring phases ---------------------------------------------------------------------------


def _timings(tel: Telemetry, kind: PhaseKind, nodes: tuple[str, ...]
             ) -> tuple[FloatArray, FloatArray] | None:
    """Per-node queue time and enqueue-to-completion time rates (s/s) of kind's operation."""
    op = (("operation", kind.operation),)
    queue = _matching(tel, Selector(OP_QUEUE_TIME, op))
    if not queue:
        return None
    q = fill_gaps(_rate_matrix(tel, queue, nodes), tel.times.size)
    request = _matching(tel, Selector(OP_REQUEST_TIME, op))
    if request:
        return q, fill_gaps(_rate_matrix(tel, request, nodes), tel.times.size)
    response = _matching(tel, Selector(OP_RESPONSE_TIME, op))
    if not response:
        return None
    return q, q + fill_gaps(_rate_matrix(tel, response, nodes), tel.times.size)


def _phase_hint(kind: PhaseKind, share: float | None, threshold: float) -> str:
    if share is None:
        return ""
    op = kind.operation
    if share >= threshold:
        return (f"client-side queueing: {share:.0%} of {op} time queued before transmission "
                f"(RPC slots); {_NFS_DIAGNOSE}")
    return f"{op} time mostly on the wire or at the server ({share:.0%} queued)"


def _measure(raw: RawPhase, kind: PhaseKind, rates: FloatArray, times: np.ndarray, step: int,
             nodes: tuple[str, ...], timings: tuple[FloatArray, FloatArray] | None,
             cfg: AnalyzeConfig) -> Phase:
    link = cfg.link_gbps
    parts: list[NodeTransfer] = []
    for k, row in enumerate(raw.nodes):
        idx = np.flatnonzero(raw.active[k])
        a, b = raw.first + int(idx[0]), raw.first + int(idx[-1])
        seg = rates[row, a:b + 1]
        moved = float(np.nansum(seg)) * step
        mean = moved / ((b - a + 1) * step)
        peak = float(np.nanmax(seg)) if np.isfinite(seg).any() else 0.0
        parts.append(NodeTransfer(nodes[row], float(times[a] - step), float(times[b]), moved,
                                  mean, peak, utilization_pct(mean, link),
                                  utilization_pct(peak, link)))
    rows = list(raw.nodes)
    cols = slice(raw.first, raw.last + 1)
    start, end = float(times[raw.first] - step), float(times[raw.last])
    total = sum(p.nbytes for p in parts)
    agg_peak = float(np.nanmax(np.nansum(rates[rows, cols], axis=0)))
    node_mean = float(np.mean([p.mean_bps for p in parts]))
    node_peak = max(p.peak_bps for p in parts)
    queue_s = op_s = None
    if timings is not None:
        queue_s = float(np.nansum(timings[0][rows, cols])) * step
        op_s = float(np.nansum(timings[1][rows, cols])) * step
    share = queue_s / op_s if queue_s is not None and op_s else None
    return Phase(kind, start, end, total, total / (end - start), agg_peak, node_mean, node_peak,
                 utilization_pct(node_mean, link), utilization_pct(node_peak, link),
                 tuple(parts), queue_s, op_s, _phase_hint(kind, share, cfg.queue_hint_share))


def _summary(phases: list[Phase], cfg: AnalyzeConfig) -> AnalysisSummary:
    saves = [p for p in phases if p.kind is PhaseKind.SAVE]
    loads = [p for p in phases if p.kind is PhaseKind.LOAD]
    utils = [n.util_mean_pct for p in saves for n in p.nodes]
    timed = [p for p in saves if p.queue_s is not None and p.op_time_s]
    share = (sum(p.queue_s or 0.0 for p in timed) / sum(p.op_time_s or 0.0 for p in timed)
             if timed else None)
    lo, hi = (min(utils), max(utils)) if utils else (None, None)
    hint = ""
    if share is not None and share >= cfg.queue_hint_share:
        hint = (f"{share:.0%} of WRITE time during saves was client-side queueing (RPC slots), "
                f"not the link or the server: {_NFS_DIAGNOSE}")
    elif hi is not None and hi < 25.0 and share is None:
        hint = (f"saves used at most {hi:.1f}% of the link; without NFS per-operation timings "
                "(node_exporter --collector.mountstats) the bottleneck cannot be placed")
    return AnalysisSummary(
        len(saves), len(loads),
        float(np.median([p.duration_s for p in saves])) if saves else None,
        float(np.median([p.duration_s for p in loads])) if loads else None,
        sum(p.nbytes for p in saves), lo, hi, share, hint)


def analyze(tel: Telemetry, cfg: AnalyzeConfig | None = None) -> CheckpointAnalysis:
    """Find checkpoint saves and loads in `tel` and measure them (see the module docstring).

    Raises `TelemetryError` when no NFS (or configured network) byte counter is present and
    `ConfigError` when the node filter matches no node.
    """
    cfg = cfg or AnalyzeConfig()
    candidates = {kind: byte_sources(kind, cfg.net_device) for kind in PhaseKind}
    nodes = _nodes(tel, [s for sels in candidates.values() for s in sels], cfg.nodes)
    if not nodes:
        raise TelemetryError(_missing_message(cfg, tel))
    step, times = tel.step_s, tel.times
    max_fill = int(cfg.phases.max_fill_s // step)
    phases: list[Phase] = []
    sources: dict[PhaseKind, str | None] = {}
    for kind, selectors in candidates.items():
        sources[kind] = None
        for sel in selectors:
            series = _matching(tel, sel)
            if not series:
                continue
            rates = fill_gaps(_rate_matrix(tel, series, nodes), max_fill)
            if not np.isfinite(rates).any():
                continue
            sources[kind] = str(sel)
            timings = _timings(tel, kind, nodes)
            found = find_phases(rates, step, cfg.phases)
            log.debug("%s: %d phases in %s over %d nodes", kind.value, len(found), sel,
                      len(nodes))
            phases += [_measure(raw, kind, rates, times, step, nodes, timings, cfg)
                       for raw in found]
            break
    if sources[PhaseKind.SAVE] is None and sources[PhaseKind.LOAD] is None:
        raise TelemetryError(_missing_message(cfg, tel))
    phases.sort(key=lambda p: (p.start, p.kind.value))
    return CheckpointAnalysis(
        tuple(phases), _summary(phases, cfg), cfg.link_gbps, step,
        float(times[0]) if times.size else 0.0, float(times[-1]) if times.size else 0.0,
        nodes, sources[PhaseKind.SAVE], sources[PhaseKind.LOAD])
