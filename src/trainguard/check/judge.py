"""The verdict on each host: compare it with the other hosts and with the operator's floors.

    >>> findings = judge(results, Floors.from_mapping({"write_mbps": 100}))  # doctest: +SKIP
    >>> summarize(findings)                                                  # doctest: +SKIP
    {'node1': <Level.PASS: 'pass'>, 'node2': <Level.SLOW: 'slow'>}

For each probe result:

1. SKIPPED gives a SKIPPED finding with the probe's reason (never a pass); ERROR gives FAIL.
2. Each hard problem a probe marked (fact ``hard_fail``: a GPU remapping failure, a failed
   DCGM test, missing GPUs) gives FAIL.
3. Each figure below its floor (above, where lower is better) gives FAIL.
4. Each figure that hosts are compared on (throughputs, see ``FIGURES``) is compared with the
   same figure on the OTHER hosts, leave-one-out so that a bad host does not drag its own
   reference: centre = their median, spread = their median absolute deviation (MAD), at least
   ``mad_floor`` of the centre. The host is SLOW only when it is worse than BOTH
   ``slow_ratio x (1 - s)`` of the centre, where ``s`` is the figure's run-to-run spread (the
   larger of the host's own, ``Figure.spread``, and the other hosts' median one: a figure
   whose repeats moved by 30% on this host is judged against 0.6 x 0.7 = 0.42x), AND ``z``
   spreads from the centre (5 MADs: about 3.4 standard deviations of normal noise, estimated
   from 7 other hosts).
   Fewer than ``min_peers`` OTHER hosts with the figure (4: with 2 or 3 a median absolute
   deviation is one or two numbers, zero when two identical hosts agree, and cannot tell a
   slow host from a noisy moment): floors only, and the reason says so.

A host is judged by its best attempt: repeated OK results of one probe on one host are merged
first (:func:`merge_attempts`, each figure at its best, its spread widened to cover the gap
between the attempts), so the controller can re-run the probes behind SLOW findings
(:func:`to_confirm`) and judge again: a transient neighbour (another job's burst for the length
of one probe) does not last into the second attempt, a hog or a throttle does. ERROR and
SKIPPED results are never merged away.

Why these defaults (0.6x, 5 MADs, a 5% spread floor): on shared machines (the acceptance runs
are 8 hosts on 2 cores and one disk) run-to-run noise of 10-20% is normal and must not flag,
while the faults worth a verdict are far larger: a tenth of the bandwidth (0.1x), a CPU hog
sharing the host's cores (about 0.5x: it leaves the probe half of each core), a throttled
checkpoint directory (0.1x or less). The ratio keeps a host from being flagged for a small gap
when the others agree closely (tiny MAD); the z keeps a noisy figure from flagging on a ratio
its noise explains. Simulated with gaussian noise on 8 hosts, a host's figure is flagged by
chance about 5 times in 100,000 at 10% noise and about 1 in 100 at 20% (before a confirming
second attempt); a 0.1x host at 10% noise is missed about 7 times in 10,000, a 0.5x host at
5% noise about 3 in 10,000. A z in MADs rather than in estimated standard deviations
(x 1.4826) because the MAD of 7 hosts is itself noisy: 7.4 MADs would miss 3% of 0.1x hosts.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from trainguard.check.floors import Floors
from trainguard.check.model import Figure, Finding, Level, ProbeResult, Status
from trainguard.check.probe_base import HARD_FAIL_FACT, is_relative
from trainguard.check.spread import relative_spread
from trainguard.textsafe import terminal_safe

MIN_PEERS = 4
"""The fewest other hosts a host is compared with; with fewer, only floors can fail it."""


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """How far from the other hosts a figure must be to make its host SLOW."""

    slow_ratio: float = 0.6
    """SLOW needs a figure below this fraction of the others' median (above its inverse for
    lower-is-better figures), narrowed by the figure's run-to-run spread: ``x (1 - spread)``."""
    z: float = 5.0
    """...and more than this many spreads (MADs of the other hosts) from it."""
    mad_floor: float = 0.05
    """The spread is at least this fraction of the median (identical hosts: MAD 0)."""
    min_peers: int = MIN_PEERS
    """Fewer OTHER hosts with a figure than this: compared with floors only."""

    def __post_init__(self) -> None:
        if not 0 < self.slow_ratio < 1:
            raise ValueError("check.slow_ratio must be in (0, 1)")
        if self.z <= 0 or self.mad_floor <= 0:
            raise ValueError("check.z and check.mad_floor must be > 0")
        if self.min_peers < MIN_PEERS:
            raise ValueError(f"check.min_peers must be >= {MIN_PEERS} (a robust spread needs "
                             f"{MIN_PEERS} other hosts)")


@dataclass(frozen=True, slots=True)
class Comparison:
    """One host's figure against the other hosts' (a pure result of :func:`compare`)."""

    centre: float
    spread: float
    ratio: float
    z: float
    slow: bool
    noise: float = 0.0
    """The run-to-run spread (relative) that narrowed the ratio threshold."""


def compare(value: float, others: Sequence[float], higher_is_better: bool,
            config: JudgeConfig, own_spread: float = 0.0,
            peer_spreads: Sequence[float] = ()) -> Comparison | None:
    """``value`` against ``others`` (the other hosts); None when there is no usable reference
    (fewer than ``min_peers`` others, or a median <= 0). ``own_spread`` and ``peer_spreads``:
    the relative run-to-run spreads of this host's figure and of the others'."""
    if len(others) < config.min_peers:
        return None
    centre = statistics.median(others)
    if centre <= 0:
        return None
    mad = statistics.median(abs(o - centre) for o in others)
    spread = max(mad, config.mad_floor * centre)
    ratio, z = value / centre, (value - centre) / spread
    noise = min(max(own_spread, statistics.median(peer_spreads) if peer_spreads else 0.0), 1.0)
    threshold = config.slow_ratio * (1.0 - noise)
    if higher_is_better:
        slow = ratio < threshold and z < -config.z
    else:
        slow = threshold > 0 and ratio > 1 / threshold and z > config.z
    return Comparison(centre, spread, ratio, z, slow, noise)


def _fmt(value: float) -> str:
    size = abs(value)
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 0.01 else f"{value:.3g}"


Table = Mapping[tuple[str, str], Sequence[tuple[str, float, float]]]


def reference_table(results: Sequence[ProbeResult]) -> Table:
    """(check, figure) -> (host, value, spread) of every finite, compared figure of the OK
    results."""
    table: dict[tuple[str, str], list[tuple[str, float, float]]] = defaultdict(list)
    for r in results:
        if r.status is Status.OK:
            for f in r.figures:
                if is_relative(f) and math.isfinite(f.value):
                    table[(r.check, f.name)].append((r.host, f.value, f.spread))
    return table


def _figure_finding(r: ProbeResult, f: Figure, table: Table, floors: Floors,
                    config: JudgeConfig) -> Finding:
    head = f"{r.check} {f.name}: {_fmt(f.value)} {f.unit}"

    def finding(level: Level, reason: str, reference: float | None) -> Finding:
        return Finding(r.host, "host", level, r.check, reason, f.name, f.value, reference)

    if not math.isfinite(f.value):
        return finding(Level.FAIL, f"{r.check} {f.name}: not a finite number", None)
    floor = floors.limits.get(f.name)
    if floor is not None and (f.value < floor if f.higher_is_better else f.value > floor):
        bound = "below the floor" if f.higher_is_better else "above the limit"
        ratio = f" ({f.value / floor:.2f}x)" if floor > 0 else ""
        return finding(Level.FAIL, f"{head}, {bound} {_fmt(floor)} {f.unit}{ratio}", floor)
    if not is_relative(f):
        note = f" (floor {_fmt(floor)})" if floor is not None else ""
        return finding(Level.PASS, f"{head}{note}", floor)
    entries = table.get((r.check, f.name), ())
    peers = [(v, s) for host, v, s in entries if host != r.host]
    hosts = len({host for host, _, _ in entries} | {r.host})
    cmp = compare(f.value, [v for v, _ in peers], f.higher_is_better, config, f.spread,
                  [s for _, s in peers])
    if cmp is None:
        why = (f"{hosts} hosts: compared with floors only (a comparison needs "
               f"{config.min_peers} other hosts)" if len(peers) < config.min_peers
               else "the other hosts' median is not positive: compared with floors only")
        return finding(Level.PASS, f"{head}; {why}", floor)
    noise = f", repeat spread {cmp.noise:.0%}" if cmp.noise > 0 else ""
    reason = (f"{head}, {cmp.ratio:.2f}x the other hosts' median {_fmt(cmp.centre)} {f.unit} "
              f"(robust z {cmp.z:+.1f}, {hosts - 1} other hosts{noise})")
    return finding(Level.SLOW if cmp.slow else Level.PASS, reason, cmp.centre)


def judge_result(r: ProbeResult, table: Table, floors: Floors,
                 config: JudgeConfig) -> list[Finding]:
    """The findings of one probe result, given every host's figures in ``table``."""
    def finding(level: Level, reason: str) -> Finding:
        return Finding(r.host, "host", level, r.check, f"{r.check}: {terminal_safe(reason)}")

    if r.status is Status.SKIPPED:
        return [finding(Level.SKIPPED, f"skipped: {r.reason or 'no reason given'}")]
    if r.status is Status.ERROR:
        return [finding(Level.FAIL, f"error: {r.reason or 'no reason given'}")]
    out = [finding(Level.FAIL, v) for k, v in r.facts if k == HARD_FAIL_FACT]
    out.extend(_figure_finding(r, f, table, floors, config) for f in r.figures)
    return out or [finding(Level.PASS, "ok")]


def _best(a: Figure, b: Figure) -> Figure:
    """The better of two attempts' figure, its spread widened to the gap between them (two
    attempts that disagree show the figure's run-to-run spread on this host)."""
    if not math.isfinite(b.value):
        return a
    if not math.isfinite(a.value):
        return b
    better = b.value > a.value if a.higher_is_better else b.value < a.value
    best = b if better else a
    return replace(best, spread=max(a.spread, b.spread, relative_spread([a.value, b.value])))


def _merge(a: ProbeResult, b: ProbeResult) -> ProbeResult:
    figures = {f.name: f for f in a.figures}
    for f in b.figures:
        figures[f.name] = _best(figures[f.name], f) if f.name in figures else f
    facts = a.facts + tuple(kv for kv in b.facts if kv not in a.facts)
    return replace(a, figures=tuple(figures.values()), facts=facts,
                   duration_s=a.duration_s + b.duration_s)


def merge_attempts(results: Sequence[ProbeResult]) -> list[ProbeResult]:
    """One result per (host, check) among the OK ones, each figure at its best over the
    attempts, and every fact (hard problems included) of any attempt; ERROR and SKIPPED
    results pass through. The order is that of first appearance."""
    merged: dict[tuple[str, str], ProbeResult] = {}
    order: list[ProbeResult | tuple[str, str]] = []
    for r in results:
        key = (r.host, r.check)
        if r.status is not Status.OK:
            order.append(r)
        elif key in merged:
            merged[key] = _merge(merged[key], r)
        else:
            merged[key] = r
            order.append(key)
    return [merged[x] if isinstance(x, tuple) else x for x in order]


def to_confirm(findings: Sequence[Finding]) -> list[tuple[str, str]]:
    """(host, check) of each SLOW host finding, once each: the probes worth a second attempt."""
    seen = dict.fromkeys((f.subject, f.check) for f in findings
                         if f.level is Level.SLOW and f.kind == "host")
    return list(seen)


def judge(results: Sequence[ProbeResult], floors: Floors | None = None,
          config: JudgeConfig | None = None) -> list[Finding]:
    """Findings for every result: SKIPPED, FAIL (error, hard problem, floor), SLOW or PASS.
    Repeated attempts of a probe on a host are merged first (:func:`merge_attempts`)."""
    floors = floors if floors is not None else Floors()
    config = config if config is not None else JudgeConfig()
    results = merge_attempts(results)
    table = reference_table(results)
    return [f for r in results for f in judge_result(r, table, floors, config)]


_SEVERITY = {Level.SKIPPED: 0, Level.PASS: 1, Level.SLOW: 2, Level.FAIL: 3}


def summarize(findings: Sequence[Finding]) -> dict[str, Level]:
    """The worst level per host (FAIL > SLOW > PASS > SKIPPED: SKIPPED only when a host has
    nothing else). A link finding counts for both of its hosts."""
    worst: dict[str, Level] = {}
    for f in findings:
        for host in f.hosts:
            if host not in worst or _SEVERITY[f.level] > _SEVERITY[worst[host]]:
                worst[host] = f.level
    return worst


__all__ = ["MIN_PEERS", "Comparison", "JudgeConfig", "compare", "judge", "judge_result",
           "merge_attempts", "reference_table", "summarize", "to_confirm"]
