"""Baselines the detector is compared against: what operators deploy today, and off-the-shelf ML.

- :func:`static_rules`: DCGM-style alert rules (XID gauge != 0, double-bit ECC errors, row-remap
  failures, temperatures over limits, NVLink CRC errors...), matched by metric-name substring so
  they work on dcgm-exporter names. They fire on application XIDs too, as deployed rules do.
- :func:`anomaly_baseline`: PyOD's ECOD (or IsolationForest) on per-node features, fit on the
  first day, thresholded at the fitted detector's own default.

Both return :class:`~trainguard.detect.alerts.AlertEpisode` lists for :func:`scorecard.score`.

    >>> DEFAULT_STATIC_RULES[0].name
    'xid'
"""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
from trainguard.errors import ConfigError
from trainguard.telemetry.frame import FloatArray, IntArray, MetricKind, MetricSeries, Telemetry

__all__ = [
    "DEFAULT_STATIC_RULES",
    "AnomalyConfig",
    "StaticRule",
    "anomaly_baseline",
    "static_rules",
]

log = logging.getLogger(__name__)

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
RuleOp = Literal["gt", "ne", "rate_gt"]


@dataclass(frozen=True, slots=True)
class StaticRule:
    """`metric op threshold` for every metric whose name contains `pattern` (case-insensitive)."""

    name: str
    pattern: str
    op: RuleOp
    """`gt`: value > threshold; `ne`: value != threshold; `rate_gt`: increase per s > threshold."""
    threshold: float = 0.0

    def __post_init__(self) -> None:
        if not self.pattern:
            raise ConfigError(f"static rule {self.name!r}: pattern must not be empty")
        if self.op not in ("gt", "ne", "rate_gt"):
            raise ConfigError(f"static rule {self.name!r}: op must be gt, ne or rate_gt")


DEFAULT_STATIC_RULES: tuple[StaticRule, ...] = (
    StaticRule("xid", "XID_ERRORS", "ne", 0.0),
    StaticRule("ecc_dbe", "ECC_DBE", "rate_gt", 0.0),  # *_VOL_TOTAL and *_AGG_TOTAL
    StaticRule("retired_pages_dbe", "RETIRED_DBE", "rate_gt", 0.0),
    StaticRule("uncorrectable_remapped_rows", "UNCORRECTABLE_REMAPPED_ROWS", "rate_gt", 0.0),
    StaticRule("row_remap_failure", "ROW_REMAP_FAILURE", "gt", 0.0),
    StaticRule("gpu_temp", "GPU_TEMP", "gt", 85.0),
    StaticRule("memory_temp", "MEMORY_TEMP", "gt", 95.0),
    StaticRule("nvlink_crc", "NVLINK_CRC", "rate_gt", 0.0),  # FLIT and DATA CRC errors
    # DCGM's PCIe health watch: more than 8 replays per minute.
    StaticRule("pcie_replay", "PCIE_REPLAY", "rate_gt", 8.0 / 60.0),
)
STATIC_GAP_S = 300.0
"""A static-rule episode ends after this long without a violating sample."""


def _maybe_rates(tel: Telemetry) -> Telemetry:
    """`telemetry.rates.to_rates(tel)` when that module exists, else the telemetry unchanged."""
    try:
        mod = importlib.import_module("trainguard.telemetry.rates")
    except ImportError:
        return tel
    fn: Callable[[Telemetry], Telemetry] = mod.to_rates
    return fn(tel)


def _per_second(m: MetricSeries, times: IntArray) -> FloatArray:
    """Increase per second since the previous reported sample, as Prometheus' `rate()` reads a
    counter: a decrease is a reset to zero, so the increase is the new value."""
    v = m.values
    if m.kind is MetricKind.RATE:
        return v
    n_t = v.shape[1]
    valid = ~np.isnan(v)
    idx = np.where(valid, np.arange(n_t), -1)
    last = np.maximum.accumulate(idx, axis=1)
    prev = np.concatenate([np.full((v.shape[0], 1), -1), last[:, :-1]], axis=1)
    ok = valid & (prev >= 0)
    p = np.maximum(prev, 0)
    pv = np.take_along_axis(v, p, axis=1)
    dt = (times[None, :] - times[p]).astype(np.float64)
    out = np.full(v.shape, np.nan)
    with np.errstate(invalid="ignore"):
        inc = np.where(v < pv, v, v - pv)
    np.divide(inc, dt, out=out, where=ok & (dt > 0))
    return out


def _violations(rule: StaticRule, m: MetricSeries, times: IntArray) -> tuple[FloatArray, BoolArray]:
    vals = _per_second(m, times) if rule.op == "rate_gt" else m.values
    with np.errstate(invalid="ignore"):
        if rule.op == "ne":
            bad = ~np.isnan(vals) & (vals != rule.threshold)
        else:
            bad = vals > rule.threshold
    return vals, bad


def _episodes(times: IntArray, active: BoolArray, gap_s: float) -> list[tuple[int, int]]:
    """Index ranges [i, j] of active samples, split where active samples are > gap_s apart."""
    idx = np.flatnonzero(active)
    if idx.size == 0:
        return []
    t = times[idx]
    cuts = np.flatnonzero(np.diff(t) > gap_s)
    starts = np.concatenate(([0], cuts + 1))
    ends = np.concatenate((cuts, [idx.size - 1]))
    return [(int(idx[s]), int(idx[e])) for s, e in zip(starts, ends, strict=True)]


def static_rules(tel: Telemetry, rules: Sequence[StaticRule] = DEFAULT_STATIC_RULES
                 ) -> list[AlertEpisode]:
    """One HARD episode per node from the first violating sample until 5 min without one.

    Signals: one per (metric, GPU) that violated during the episode, with the value (or the
    per-second increase for `rate_gt` rules) at its first violation; `detail` names the rule.
    `peak_score` is the number of such signals.

    Levels are read as reported: `telemetry.rates.to_rates` is not applied here because its
    cumulative-in-fact test also takes step-like gauges (the XID gauge going 0 -> 79 and staying)
    for counters; `rate_gt` rules compute their own per-second increase instead.
    """
    nodes = tel.nodes
    node_ix = {n: i for i, n in enumerate(nodes)}
    any_bad = np.zeros((len(nodes), tel.times.size), dtype=bool)
    # (node index, rule, metric, gpu, values row, violations row) for rows that ever violate
    hits: list[tuple[int, StaticRule, str, str | None, FloatArray, BoolArray]] = []
    for m in tel.metrics:
        for rule in rules:
            if rule.pattern.upper() not in m.name.upper():
                continue
            vals, bad = _violations(rule, m, tel.times)
            for r in np.flatnonzero(bad.any(axis=1)):
                ent = m.entities[r]
                ni = node_ix[ent.node]
                any_bad[ni] |= bad[r]
                hits.append((ni, rule, m.name, ent.gpu, vals[r], bad[r]))
    out: list[AlertEpisode] = []
    for ni, node in enumerate(nodes):
        mine = [h for h in hits if h[0] == ni]
        for i, j in _episodes(tel.times, any_bad[ni], STATIC_GAP_S):
            sigs: list[tuple[int, Signal]] = []
            for _, rule, metric, gpu, vals, bad in mine:
                k = np.flatnonzero(bad[i:j + 1])
                if k.size:
                    first = i + int(k[0])
                    sigs.append((first, Signal(metric, gpu, float(vals[first]), rule.name)))
            sigs.sort(key=lambda s: (s[0], s[1].metric, s[1].gpu or ""))
            out.append(AlertEpisode(node, float(tel.times[i]), float(tel.times[j]),
                                    float(len(sigs)), AlertKind.HARD,
                                    tuple(s for _, s in sigs), "static_rules"))
    out.sort(key=lambda a: (a.start, a.node))
    return out


# --- off-the-shelf anomaly detection ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnomalyConfig:
    """Settings of :func:`anomaly_baseline`."""

    method: Literal["ecod", "iforest"] = "ecod"
    """PyOD model: `ecod` (parameter-free) or `iforest` (IsolationForest)."""
    fit_s: float = 86400.0
    """Fit on the first `fit_s` seconds, at most the first quarter of the data."""
    max_fit_rows: int = 10_000
    """Node-steps sampled (evenly, seeded) from the fit period to fit the model."""
    min_run_steps: int = 3
    """Anomalous steps in a row before an alert starts."""
    cooldown_s: float = 600.0
    """Runs closer than this to the previous one extend its episode instead of paging again."""
    top_signals: int = 3
    """Features reported per episode, by |z| against the fit period."""
    score_chunk_s: float = 1800.0
    """Steps scored per `decision_function` call, all nodes together (see step 3)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in ("ecod", "iforest"):
            raise ConfigError("anomaly.method must be 'ecod' or 'iforest'")
        if self.fit_s <= 0:
            raise ConfigError("anomaly.fit_s must be > 0")
        if self.max_fit_rows < 10:
            raise ConfigError("anomaly.max_fit_rows must be >= 10")
        if self.min_run_steps < 1:
            raise ConfigError("anomaly.min_run_steps must be >= 1")
        if self.score_chunk_s <= 0:
            raise ConfigError("anomaly.score_chunk_s must be > 0")
        if self.cooldown_s < 0:
            raise ConfigError("anomaly.cooldown_s must be >= 0")


@dataclass(frozen=True, slots=True)
class _Feature:
    metric: str
    detail: str
    values: np.ndarray[Any, np.dtype[np.float32]]  # [node, time]


def _node_features(tel: Telemetry, nodes: Sequence[str]) -> list[_Feature]:
    """Per metric: node median and max across GPUs (per-GPU metrics) or the node's value."""
    node_ix = {n: i for i, n in enumerate(nodes)}
    n_t = tel.times.size
    feats: list[_Feature] = []
    for m in tel.metrics:
        groups: dict[int, list[int]] = {}
        for r, ent in enumerate(m.entities):
            groups.setdefault(node_ix[ent.node], []).append(r)
        med = np.full((len(nodes), n_t), np.nan, dtype=np.float32)
        mx = np.full((len(nodes), n_t), np.nan, dtype=np.float32)
        sizes = {len(g) for g in groups.values()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
            if len(sizes) == 1:  # the usual case: every node has the same GPU count
                order = sorted(groups)
                block = m.values[np.array([groups[n] for n in order])]  # [node, gpu, time]
                reduce_med = np.median if not np.isnan(block).any() else np.nanmedian
                med[order] = reduce_med(block, axis=1)
                mx[order] = np.nanmax(block, axis=1)
            else:
                for n, rows in groups.items():
                    med[n] = np.nanmedian(m.values[rows], axis=0)
                    mx[n] = np.nanmax(m.values[rows], axis=0)
        if m.per_gpu:
            feats += [_Feature(m.name, "median over GPUs", med),
                      _Feature(m.name, "max over GPUs", mx)]
        else:
            feats.append(_Feature(m.name, "", mx))
    return feats


def _import_pyod(method: str) -> Any:
    try:
        if method == "ecod":
            return importlib.import_module("pyod.models.ecod").ECOD
        return importlib.import_module("pyod.models.iforest").IForest
    except ImportError as exc:
        raise ConfigError(f"the {method} baseline needs PyOD: "
                          "pip install 'trainguard[baselines]'") from exc


def _runs(active: BoolArray, min_len: int) -> list[tuple[int, int]]:
    """[start, end] index ranges of runs of True at least `min_len` long."""
    padded = np.concatenate(([False], active, [False])).astype(np.int8)
    d = np.diff(padded)
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
    keep = ends - starts + 1 >= min_len
    return list(zip(starts[keep].tolist(), ends[keep].tolist(), strict=True))


def anomaly_baseline(tel: Telemetry, method: Literal["ecod", "iforest"] | None = None,
                     config: AnomalyConfig | None = None) -> list[AlertEpisode]:
    """Off-the-shelf PyOD anomaly detection over per-node features; PREDICTIVE episodes.

    1. features per node and step: each metric's median and max across the node's GPUs (the
       value for node-level metrics); missing values are filled with the fit-period median and
       features never seen in the fit period are dropped;
    2. fit the model on up to `max_fit_rows` node-steps sampled from the first
       min(`fit_s`, 25 % of the data), pooled over nodes;
    3. score the remaining steps in slices of `score_chunk_s`, all nodes per call. PyOD's ECOD
       is transductive: `decision_function` re-ranks the fit rows *together with* the rows it
       scores, so scoring a node's whole week at once would let a long anomaly dilute itself;
       half an hour of the fleet per call keeps one node's slice near 0.5 % of the ranked rows;
    4. a step is anomalous when its score exceeds the fitted model's `threshold_`, which PyOD
       sets at the (1 - contamination) quantile of the training scores, contamination 0.1 by
       default: by construction 10 % of normal steps are above it;
    5. runs of >= `min_run_steps` anomalous steps become episodes; runs within `cooldown_s` of
       the previous run's end extend it; signals are the top features by |z| (median/MAD of the
       fit period) at the episode's highest-scoring step.
    """
    cfg = config or AnomalyConfig()
    if method is not None and method != cfg.method:
        cfg = replace(cfg, method=method)
    model_cls = _import_pyod(cfg.method)
    tel = _maybe_rates(tel)
    nodes, times = tel.nodes, tel.times
    if times.size < 2 * cfg.min_run_steps or not nodes:
        return []
    span = float(times[-1] - times[0]) + tel.step_s
    n_fit = int(np.searchsorted(times, times[0] + min(cfg.fit_s, 0.25 * span), side="left"))
    if n_fit < 2 or n_fit >= times.size:
        return []

    # 1. features and fit-period statistics
    feats = _node_features(tel, nodes)
    fit_blocks = [f.values[:, :n_fit].astype(np.float64) for f in feats]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.array([np.nanmedian(b) for b in fit_blocks])
        mad = np.array([np.nanmedian(np.abs(b - c)) for b, c in zip(fit_blocks, med, strict=True)])
        std = np.array([np.nanstd(b) for b in fit_blocks])
    keep = np.flatnonzero(~np.isnan(med))
    if keep.size == 0:
        return []
    feats = [feats[i] for i in keep]
    med, mad, std = med[keep], mad[keep], std[keep]
    scale = np.where(mad > 0, 1.4826 * mad, np.where(std > 0, std, np.maximum(np.abs(med), 1.0)))

    def matrix(node: int, lo: int, hi: int) -> FloatArray:
        x = np.stack([f.values[node, lo:hi] for f in feats], axis=1).astype(np.float64)
        return np.where(np.isnan(x), med[None, :], x)

    # 2. fit on a seeded sample of node-steps
    rng = np.random.default_rng(cfg.seed)
    n_rows = len(nodes) * n_fit
    pick = np.sort(rng.choice(n_rows, size=min(cfg.max_fit_rows, n_rows), replace=False))
    x_fit = np.concatenate([matrix(n, 0, n_fit)[pick[(pick // n_fit) == n] % n_fit]
                            for n in range(len(nodes))])
    const = np.ptp(x_fit, axis=0) == 0
    if const.any():
        # ECOD's skewness is NaN on a constant column and would make every score NaN: a +-1e-9
        # relative wiggle keeps the column (a later jump still stands out) and the math defined.
        wiggle = np.where(np.arange(x_fit.shape[0]) % 2 == 0, 1.0, -1.0)[:, None]
        x_fit[:, const] += wiggle * 1e-9 * np.maximum(np.abs(x_fit[0, const]), 1.0)
    model = model_cls(random_state=cfg.seed) if cfg.method == "iforest" else model_cls()
    model.fit(x_fit)
    threshold = float(model.threshold_)
    log.info("%s baseline: fit on %d node-steps x %d features, threshold %.3f",
             cfg.method, x_fit.shape[0], len(feats), threshold)

    # 3. score one time slice of the whole fleet per call
    n_nodes, n_score = len(nodes), times.size - n_fit
    chunk = max(1, int(cfg.score_chunk_s // tel.step_s))
    scores = np.empty((n_nodes, n_score))
    for lo in range(n_fit, times.size, chunk):
        hi = min(lo + chunk, times.size)
        x = np.concatenate([matrix(n, lo, hi) for n in range(n_nodes)])
        s = np.asarray(model.decision_function(x), dtype=np.float64)
        scores[:, lo - n_fit:hi - n_fit] = s.reshape(n_nodes, hi - lo)
    anomalous = np.nan_to_num(scores, nan=-np.inf) > threshold

    # 4.-5. episodes per node
    source = f"pyod_{cfg.method}"
    out: list[AlertEpisode] = []
    for n, node in enumerate(nodes):
        episodes: list[list[int]] = []
        for s0, e0 in _runs(anomalous[n], cfg.min_run_steps):
            if episodes and times[n_fit + s0] - times[n_fit + episodes[-1][1]] <= cfg.cooldown_s:
                episodes[-1][1] = e0
            else:
                episodes.append([s0, e0])
        for s0, e0 in episodes:
            peak = s0 + int(np.argmax(scores[n, s0:e0 + 1]))
            z = (matrix(n, n_fit + peak, n_fit + peak + 1)[0] - med) / scale
            top = np.argsort(-np.abs(z), kind="stable")[:cfg.top_signals]
            sigs = tuple(Signal(feats[i].metric, None, float(z[i]), feats[i].detail)
                         for i in top)
            out.append(AlertEpisode(node, float(times[n_fit + s0]), float(times[n_fit + e0]),
                                    float(scores[n, peak]), AlertKind.PREDICTIVE, sigs, source))
    out.sort(key=lambda a: (a.start, a.node))
    return out
