"""The terminal table of `trainguard detect`: one row per alert episode, its evidence in the
detector's own words.

Outline of a row's "top signals" cell (:func:`signals_cell`):

1. group the episode's signals by series, (metric, GPU): an early-warning finding that fired
   again later in the episode, or the same series again at the episode's peak, is one entry
   with a repeat count; each XID of a hard alert is its own entry (an XID 79 and an XID 48 on
   one GPU are two findings);
2. each entry keeps its earliest finding (a signal with the detector's own words, e.g. "error
   count recurring: 4 of the last 15 blocks", which is what paged), else its strongest
   deviation;
3. a finding is shown in its own words; a bare deviation in robust standard deviations (σ),
   the unit it is computed in; a hard rule's bare value as the number it is;
4. a hard alert's XIDs are always shown, first; the other entries fill the remaining places
   (`SHOWN`), and what did not fit is counted (``+2 more``), so the text cut is never the XID.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.markup import escape
from rich.table import Table

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal

__all__ = ["SHOWN", "ShownSignal", "alerts_table", "distinct_signals", "is_xid", "pick",
           "signal_text", "signals_cell"]

SHOWN = 3
"""Entries in a row's "top signals" cell besides a hard alert's XIDs (always all shown)."""


@dataclass(frozen=True, slots=True)
class ShownSignal:
    """One series of an episode: the signal that stands for it and how many it stands for."""

    signal: Signal
    count: int = 1


def is_xid(s: Signal) -> bool:
    return s.detail.startswith("XID ")


def _key(s: Signal) -> tuple[str, str | None, str]:
    return (s.metric, s.gpu, s.detail if is_xid(s) else "")


def _better(a: Signal, b: Signal) -> bool:
    """`a` stands for its series rather than `b`: a finding in words first (the earlier one,
    `a` comes first), else the stronger deviation."""
    if bool(a.detail) != bool(b.detail):
        return bool(a.detail)
    return bool(a.detail) or abs(a.deviation) >= abs(b.deviation)


def distinct_signals(signals: Sequence[Signal]) -> list[ShownSignal]:
    """One entry per series in order of first appearance (outline steps 1-2)."""
    kept: dict[tuple[str, str | None, str], ShownSignal] = {}
    for s in signals:
        key = _key(s)
        old = kept.get(key)
        if old is None:
            kept[key] = ShownSignal(s)
        else:
            best = old.signal if _better(old.signal, s) else s
            kept[key] = ShownSignal(best, old.count + 1)
    return list(kept.values())


def signal_text(s: Signal, *, hard: bool, count: int = 1) -> str:
    """One entry: ``metric gpuN: finding``, ``metric gpuN +4.3σ`` (a predictive deviation), or
    ``metric gpuN: 2`` (the value that tripped a hard rule); ``(×N)`` when it stands for N."""
    where = s.metric if s.gpu is None else f"{s.metric} gpu{s.gpu}"
    if s.detail:
        text = f"{where}: {s.detail}"
    elif hard:
        text = f"{where}: {s.deviation:g}"
    else:
        text = f"{where} {s.deviation:+.1f}σ"
    return text if count == 1 else f"{text} (×{count})"


def pick(entries: Sequence[ShownSignal], shown: int = SHOWN) -> list[ShownSignal]:
    """Every XID first, then the other entries up to `shown` in all (outline step 4)."""
    xids = [e for e in entries if is_xid(e.signal)]
    others = [e for e in entries if not is_xid(e.signal)]
    return xids + others[:max(0, shown - len(xids))]


def signals_cell(signals: Sequence[Signal], *, hard: bool, shown: int = SHOWN) -> str:
    """The "top signals" cell of one episode (outline steps 3-4)."""
    entries = distinct_signals(signals)
    keep = pick(entries, shown)
    parts = [signal_text(e.signal, hard=hard, count=e.count) for e in keep]
    if len(keep) < len(entries):
        parts.append(f"+{len(entries) - len(keep)} more")
    return ", ".join(parts)


def _fmt_t(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def alerts_table(alerts: Sequence[AlertEpisode], limit: int) -> Table:
    """The episodes as a table (`limit` rows, 0 = all); the caption says when rows were left
    out and that ``--json`` has every signal."""
    table = Table(title=f"{len(alerts)} alert episodes", title_justify="left")
    for col in ("node", "start (UTC)", "min", "kind", "peak", "top signals"):
        table.add_column(col)
    shown = alerts if limit == 0 else alerts[:limit]
    repeated = cut = False
    for a in shown:
        hard = a.kind is AlertKind.HARD
        entries = distinct_signals(a.signals)
        repeated = repeated or any(e.count > 1 for e in entries)
        cut = cut or len(pick(entries)) < len(entries)
        table.add_row(a.node, _fmt_t(a.start), f"{(a.end - a.start) / 60:.0f}", a.kind.value,
                      f"{a.peak_score:.1f}", escape(signals_cell(a.signals, hard=hard)))
    notes = []
    if len(shown) < len(alerts):
        notes.append(f"first {len(shown)} of {len(alerts)}; --limit 0 shows all")
    if repeated:
        notes.append("(×N): one series flagged N times in the episode")
    if cut:
        notes.append("--json lists every signal")
    if notes:
        table.caption = "; ".join(notes)
    return table
