"""The report's summary as (metric, value) text rows: the terminal table of ``trainguard report``
and the table at the top of the HTML report are the same rows.

Every duration goes through :func:`trainguard.durations.format_duration`; a figure the data cannot
support is written as what is missing instead: "unknown (no SDK)" for times a script without the
SDK cannot report, "too little data (...)" for a rate or an interval from too little exposure
(:mod:`trainguard.analytics.exposure`).
"""

from __future__ import annotations

from trainguard.analytics.goodput import Goodput
from trainguard.analytics.leadtime import LeadTimeSummary
from trainguard.analytics.report import AnalyticsReport
from trainguard.analytics.runs import restore_info
from trainguard.durations import format_duration

NO_SDK = "unknown (no SDK)"


def ettr_text(g: Goodput) -> str:
    """``45.0%``; ``unknown (no SDK)``; or the ETTR of the known runs and how much they cover."""
    if g.ettr is None:
        return NO_SDK if g.unknown_s > 0 else "n/a"
    if g.unknown_s > 0 and g.wall_s > 0:
        return (f"{g.ettr:.1%} (over the {g.covered_wall_s / g.wall_s:.0%} of wall time with the "
                "SDK; the rest unknown)")
    return f"{g.ettr:.1%}"


def badput_parts(g: Goodput) -> list[tuple[str, float]]:
    """Where the wall time that did not train went, cause by cause (non-zero ones), with the
    time that cannot be split without the SDK last."""
    b = g.badput
    parts = [(f"startup: {name}", v) for name, v in b.startup.items()]
    parts += [("checkpoint blocking", b.checkpoint_blocking_s),
              ("lost progress", b.lost_progress_s), ("failure detection", b.detection_s),
              ("teardown", b.teardown_s), ("relaunch wait", b.relaunch_wait_s),
              ("host checks", b.host_checks_s), ("hang", b.hang_s), ("queue", b.queue_s),
              ("other", b.other_s), (NO_SDK, g.unknown_s)]
    return [(label, v) for label, v in parts if v > 0]


def badput_rows(g: Goodput) -> list[tuple[str, str]]:
    """``("badput: startup: imports", "8.4 s (35.1%)")``...; the time a script without the SDK
    could not report is not badput and is labelled as what it is."""
    if g.wall_s <= 0:
        return []
    rows = []
    for label, v in badput_parts(g):
        if label == NO_SDK:
            rows.append((NO_SDK, f"{format_duration(v)} ({v / g.wall_s:.1%}): imports, "
                                 "rendezvous, first step and training, which only the SDK "
                                 "reports"))
            continue
        rows.append((f"badput: {label}", f"{format_duration(v)} ({v / g.wall_s:.1%})"))
        rows += [(f"badput: {label} ({sub})", f"{format_duration(x)} ({x / g.wall_s:.1%})")
                 for sub, x in _splits(g, label)]
    # Relaunches' startup by warm/cold start, after the startup rows (a view of them).
    at = max((i + 1 for i, (k, _) in enumerate(rows) if k.startswith("badput: startup: ")),
             default=0)
    rows[at:at] = [(f"badput: startup of relaunches ({k} start)",
                    f"{format_duration(x)} ({x / g.wall_s:.1%})")
                   for k, x in sorted(g.badput.restart.items())]
    return rows


_RESTORED = {"memory": "restored from memory", "buddy": "restored from a buddy",
             "mixed": "restored from memory and buddies", "disk": "restored from disk",
             "none": "restarted from scratch",
             "unknown": "resumed as the script chose (no SDK)"}


def _splits(g: Goodput, label: str) -> list[tuple[str, float]]:
    """Views of one badput row: lost progress by restore source (only when there is
    something to tell apart)."""
    b = g.badput
    if label == "lost progress" and set(b.lost_progress_by_source) - {"disk"}:
        return [(_RESTORED.get(k, k), v) for k, v in sorted(b.lost_progress_by_source.items())]
    return []


def recoveries_text(r: AnalyticsReport) -> str | None:
    """``attempt 1: memory, step 25, 3 steps lost; ...`` over the runs' relaunches that
    recorded where they restored from."""
    parts = []
    for chain in r.chains:
        for a in chain.attempts:
            info = restore_info(a)
            if a.index == 0 or not info:
                continue
            lost = info.get("steps_lost")
            step = info.get("step")
            parts.append(f"attempt {a.index}: {info.get('source')}"
                         + (f" (step {step})" if step is not None else "")
                         + (f", {lost} steps lost" if lost is not None else ""))
    return "; ".join(parts) or None


def productive_text(g: Goodput) -> str:
    """``10.8 s / 24.0 s``; the productive part is unknown when no run reported it."""
    productive = NO_SDK if g.unknown_s > 0 and g.covered_wall_s == 0 else \
        format_duration(g.productive_s)
    return f"{productive} / {format_duration(g.wall_s)}"


def lead_text(lt: LeadTimeSummary) -> str:
    """``1 of 2 failures had an alert first (1 predictive stop...), 1 missed; median lead...;
    not detector misses: 1 injected fault, 1 user-code failure`` over the failures that named
    a culprit node. Injected faults and failures of the job's own code are no detector's to
    see: they are counted apart, never as misses."""
    text = f"{lt.predicted} of {lt.with_culprit} failures had an alert first"
    if lt.stopped:
        text += f" ({lt.stopped} predictive stop{'s' if lt.stopped > 1 else ''}: the job moved)"
    text += f", {lt.missed} missed"
    if lt.lead_median_s is not None:
        text += f"; median lead {format_duration(lt.lead_median_s)}"
    apart = [f"{n} {what}{'s' if n > 1 else ''}" for n, what in
             ((lt.injected, "injected fault"), (lt.user_code, "user-code failure")) if n]
    if apart:
        text += f"; not detector misses: {', '.join(apart)}"
    return text


def stop_latency_text(lt: LeadTimeSummary) -> str | None:
    """``0.087 s (1 stop)``: how long after its alert each stopped attempt was stopped (the
    reaction time, not a lead); None without stops."""
    stops = sorted(x.stop_latency_s for x in lt.leads if x.stop_latency_s is not None)
    if not stops:
        return None
    n = len(stops)
    mid = stops[n // 2] if n % 2 else (stops[n // 2 - 1] + stops[n // 2]) / 2
    what = f"{n} stop{'s' if n > 1 else ''}"
    return f"{format_duration(mid)} ({what})" if n == 1 else \
        f"median {format_duration(mid)} ({what})"


def _mttr_text(r: AnalyticsReport) -> str | None:
    f = r.failures
    unknown = f.resumes_unknown
    if f.mttr_s is None:
        return NO_SDK if unknown else None
    if unknown:
        return (f"{format_duration(f.mttr_s)} ({len(f.resume_s)} recoveries; {unknown} "
                f"{NO_SDK})")
    return format_duration(f.mttr_s)


def _failures_text(r: AnalyticsReport) -> str:
    f, support = r.failures, r.rate_support
    if f.per_node_day is None:
        return str(f.failures)
    if support is not None and not support.supported:
        return f"{f.failures} (rate per node-day: {support.caveat})"
    return f"{f.failures} ({f.per_node_day:.3g} per node-day)"


def summary_rows(r: AnalyticsReport) -> list[tuple[str, str]]:
    """The summary, in the order docs/report.md lists it."""
    g, s = r.goodput, r.chain_stats.get("all")
    rows = [("runs", str(len(r.runs))), ("ETTR", ettr_text(g)),
            ("productive / wall", productive_text(g))]
    rows += badput_rows(g)
    if s is not None:
        rows.append(("retry chains", f"{s.chains} ({s.success_rate:.0%} succeeded)"
                     if s.success_rate is not None else str(s.chains)))
        if s.chains:
            rows.append(("retry chains stopped as crash loops", str(s.crash_loops)))
        if s.retry_interval_median_s is not None:
            rows.append(("median retry interval", format_duration(s.retry_interval_median_s)))
    rows.append(("failures", _failures_text(r)))
    recoveries = recoveries_text(r)
    if recoveries is not None:
        rows.append(("recoveries (restore source)", recoveries))
    mttr = _mttr_text(r)
    if mttr is not None:
        rows.append(("MTTR (failure to resume)", mttr))
    ex = r.exclusions.summary
    if ex.total:
        rows.append((f"top-{ex.top_k} exclusion share", f"{ex.top_k_share:.0%}"))
    if r.lemons:
        rows.append(("lemon nodes", ", ".join(n.node for n in r.lemons)))
    lt = r.lead_times
    if lt.with_culprit or lt.injected or lt.user_code:
        rows.append(("detector alerts", lead_text(lt)))
        if (latency := stop_latency_text(lt)) is not None:
            rows.append(("alert to stop (reaction)", latency))
    if r.advice is not None:
        support = r.advice_support
        rows.append(("best checkpoint interval (model)",
                     support.caveat if support is not None and not support.supported and
                     support.caveat else
                     f"{format_duration(r.advice.optimal_interval_s)} -> ETTR "
                     f"{r.advice.optimal_ettr:.1%}"))
    return rows


__all__ = ["NO_SDK", "badput_parts", "badput_rows", "ettr_text", "lead_text", "productive_text",
           "recoveries_text", "stop_latency_text", "summary_rows"]
