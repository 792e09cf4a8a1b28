"""A host check in words (pure: no I/O): each host's measured figures with their floor and
verdict, its link rates, the notes a reader needs (figures judged by floors only), and the
one-line summary, which names the failed probe and floor when every host fails.

    summary_line(report)   # 'all 4 hosts failed: cpu_gemm gemm_gflops 812 GFLOP/s < floor 1000'
    figure_lines(report, "node3")   # ['gemm_gflops 48.2 GFLOP/s: pass (0.98x ...; no floor)']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainguard.check.checker import CheckReport
from trainguard.check.judge import MIN_PEERS, merge_attempts, reference_table
from trainguard.check.model import Finding, Level
from trainguard.check.pairing import CHECK as LINK_CHECK
from trainguard.check.probe_base import FIGURES
from trainguard.textsafe import terminal_safe

MAX_CAUSES = 3
"""The most distinct causes a summary line names."""


def number(value: float) -> str:
    """A figure for people: 3 significant digits, thousands separated."""
    size = abs(value)
    if not math.isfinite(value):
        return str(value)
    if size >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 0.01 else f"{value:.3g}"


def unit_of(figure: str) -> str:
    spec = FIGURES.get(figure)
    return spec.unit if spec is not None else ""


def _lower_is_better(figure: str) -> bool:
    spec = FIGURES.get(figure)
    return spec is not None and not spec.higher_is_better


def is_floor_failure(f: Finding, floors: Mapping[str, float] | None = None) -> bool:
    """A FAIL because a figure missed its floor (the judge's reference is the floor)."""
    limit = (floors or {}).get(f.figure)
    return (f.level is Level.FAIL and bool(f.figure) and f.value is not None
            and limit is not None and f.reference == limit)


def _floor_text(figure: str, limit: float) -> str:
    word = "limit" if _lower_is_better(figure) else "floor"
    return f"{word} {number(limit)}"


def figure_line(f: Finding, floors: Mapping[str, float]) -> str:
    """One measured figure: value, verdict, what it was compared with, its floor."""
    assert f.value is not None
    if f.figure not in FIGURES:  # a reading of the controller's (the clock offset)
        return f"{terminal_safe(f.reason)}: {f.level.value}"
    unit = unit_of(f.figure)
    head = f"{f.figure} {number(f.value)}{' ' + unit if unit else ''}"
    limit = floors.get(f.figure)
    basis: list[str] = []
    if f.reference is not None and f.reference != limit and f.reference > 0:
        basis.append(f"{f.value / f.reference:.2f}x the others' median {number(f.reference)}")
    basis.append(_floor_text(f.figure, limit) if limit is not None else "no floor")
    if is_floor_failure(f, floors):
        assert limit is not None
        sign = ">" if _lower_is_better(f.figure) else "<"
        return f"{head}: FAIL, {sign} {_floor_text(f.figure, limit)}"
    return f"{head}: {f.level.value} ({'; '.join(basis)})"


def figure_lines(report: CheckReport, host: str) -> list[str]:
    """Each probe figure measured on ``host``, as :func:`figure_line` (link rates apart)."""
    floors = dict(report.floors)
    return [figure_line(f, floors) for f in report.findings
            if f.kind == "host" and f.subject == host and f.figure and f.value is not None
            and f.check != LINK_CHECK]


def link_line(report: CheckReport, host: str) -> str | None:
    """``host``'s measured links, ``links: 2,100 MB/s with n2, 950 then 2,000 MB/s with n4``
    (None when none was measured)."""
    by_peer: dict[str, list[float | None]] = {}
    for a, b, mbps in report.links:
        if host in (a, b):
            by_peer.setdefault(b if a == host else a, []).append(mbps)
    if not by_peer:
        return None
    parts = [" then ".join("no data" if v is None else number(v) for v in values)
             + f" MB/s with {peer}" for peer, values in by_peer.items()]
    return "links: " + ", ".join(parts)


def evidence_lines(report: CheckReport, host: str) -> list[str]:
    """Why ``host`` has its verdict: its problems (or that everything passed), what was
    skipped and why, and re-measured links that came back fine."""
    mine = [f for f in report.findings if host in f.hosts and f.kind != "cluster"]
    bad = [terminal_safe(f.reason) for f in mine if f.level in (Level.SLOW, Level.FAIL)]
    skipped = [f for f in mine if f.level is Level.SKIPPED]
    lines = bad or ["all probes passed"]
    if skipped:
        lines.append("skipped: " + "; ".join(
            f"{f.check} ({terminal_safe(f.reason)})" for f in skipped))
    lines += [terminal_safe(f.reason) for f in mine
              if f.kind == "link" and f.level is Level.PASS]
    return lines


def notes(report: CheckReport) -> list[str]:
    """What the reader must know to weigh the verdicts: figures compared with the floors only
    (too few hosts to compare them with each other), and whether those have floors at all."""
    out: list[str] = []
    table = reference_table(merge_attempts(report.results))
    thin = sorted({name for (_, name), entries in table.items()
                   if len({host for host, _, _ in entries}) < MIN_PEERS + 1})
    if thin:
        counts = sorted({len({h for h, _, _ in entries}) for (_, name), entries in table.items()
                         if name in thin})
        hosts = "/".join(str(c) for c in counts)
        unfloored = [name for name in thin if name not in report.floors]
        out.append(f"floors only: {hosts} host(s) measured {', '.join(thin)}, fewer than "
                   f"{MIN_PEERS + 1}: they are compared with the floors only, not between "
                   "hosts" + (f" (no floor set for {', '.join(unfloored)}: "
                              "nothing judges them; see --floors)" if unfloored else ""))
    linked = {h for a, b, _ in report.links for h in (a, b)}
    if len(linked) == 2:
        out.append("floors only: 2 hosts' link is compared with the floor only (there is no "
                   "other pair to compare it with)")
    return out


@dataclass(frozen=True, slots=True)
class _Cause:
    text: str
    hosts: tuple[str, ...]


def _causes(report: CheckReport, flagged: Sequence[str]) -> list[_Cause]:
    """The problems of the ``flagged`` hosts, grouped: one floor failure per figure (with the
    best value of the hosts that missed it), else one per check and level."""
    floors = dict(report.floors)
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for f in report.problems():
        if not set(f.hosts) & set(flagged):
            continue
        key = (f.check, f.figure, "floor") if is_floor_failure(f, floors) \
            else (f.check, "", f.level.value)
        groups.setdefault(key, []).append(f)
    out = []
    for (check, figure, kind), found in groups.items():
        hosts = tuple(dict.fromkeys(h for f in found for h in f.hosts if h in flagged))
        if kind == "floor":
            values = [f.value for f in found if f.value is not None]
            best = min(values) if _lower_is_better(figure) else max(values)
            limit = floors[figure]
            sign = ">" if _lower_is_better(figure) else "<"
            most = " at most" if len(values) > 1 and not _lower_is_better(figure) \
                else " at least" if len(values) > 1 else ""
            unit = unit_of(figure)
            text = (f"{check} {figure}{most} {number(best)} {unit} {sign} "
                    f"{_floor_text(figure, limit)}")
        else:
            text = terminal_safe(found[0].reason)
            text = text if len(text) <= 120 else text[:119] + "…"
        out.append(_Cause(text, hosts))
    out.sort(key=lambda c: -len(c.hosts))
    return out


def cause_text(report: CheckReport, flagged: Sequence[str]) -> str:
    """The problems of ``flagged`` hosts in a few words: 'cpu_gemm gemm_gflops 812 GFLOP/s
    < floor 1000' when they share one, else the causes with the hosts each covers."""
    causes = _causes(report, flagged)
    parts = []
    for c in causes[:MAX_CAUSES]:
        whose = "" if len(c.hosts) == len(flagged) else f" ({', '.join(c.hosts)})"
        parts.append(f"{c.text}{whose}")
    if len(causes) > MAX_CAUSES:
        parts.append(f"and {len(causes) - MAX_CAUSES} more")
    return "; ".join(parts) or "no reason recorded"


def summary_line(report: CheckReport) -> str:
    """The check in one line: all passed; which hosts were flagged; or, when every host was,
    what they failed (the probe and the floor)."""
    n = len(report.hosts)
    flagged = report.flagged()
    cluster = [f for f in report.problems() if f.kind == "cluster"]
    if not flagged:
        if not cluster:
            return f"all {n} host(s) passed"
        return f"every host passed on its own, but: {terminal_safe(cluster[0].reason)}"
    if len(flagged) == n:
        failed = all(report.verdicts.get(h) is Level.FAIL for h in flagged)
        verb = "failed" if failed else "were flagged"
        return f"all {n} host(s) {verb}: {cause_text(report, flagged)}"
    names = ", ".join(f"{h} ({report.verdicts[h].value})" for h in flagged)
    return f"{len(flagged)} of {n} host(s) flagged: {names}: {cause_text(report, flagged)}"


__all__ = ["cause_text", "evidence_lines", "figure_line", "figure_lines", "is_floor_failure",
           "link_line", "notes", "number", "summary_line"]
