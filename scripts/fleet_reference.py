"""Independent reference figures for a node fault trace (standard library only).

Written from the definitions below, not from trainguard's code, so that `trainguard fleet` can
be checked against a second implementation of the same arithmetic. It reads:

- an InfiniteHBD-format JSON array (``node_id``, ``event_time``, ``event_type``
  ``fault_start``/``fault_end``, ``fault_type`` {``Level``, ``Class``, ``Desc``}); times in the
  file's unit (``--time-unit``, default days);
- or a CSV with the header ``node,start,end,kind``: one fault per row, unix seconds, an empty
  ``end`` for a fault still open; ``kind`` may be hierarchical (``"Level / Class / Desc"``).

    python scripts/fleet_reference.py fault_trace.json --fleet-size 400 --time-unit days

Definitions:

- fault type (kind) = the type levels joined with " / "; its Level = the first level.
- pairing: a ``fault_end`` closes the oldest still-open ``fault_start`` of the same node and
  kind (FIFO); a start never closed is an open fault; an end with nothing open is counted as an
  unmatched end and otherwise ignored. Events are taken in time order (file order for ties).
- window [start, end): default start 0 for JSON (times are relative), the first fault start for
  CSV; default end the last event (start or end) in the file. A fault counts when its start is
  inside the window.
- node-days = fleet size x window length in days (down time is not subtracted).
- rate = faults / node-days; MTBF per node = node-days / faults (days); MTBF of an N-node job =
  MTBF per node / N.
- repair time = end - start of a counted fault that has an end (open faults have none); median,
  p90 and mean in hours; quantiles interpolate linearly between order statistics (numpy's
  default, "type 7": h = (n - 1) p).
- nodes down: a node is down while any of its faults is (the union of its faults' intervals,
  each clipped to the window; an open fault lasts to the window end). Mean = total node down
  time / window length; max = most nodes down at one instant.
- top-k share: faults of the k nodes with the most counted faults / all counted faults (ties
  listed by node id; the share does not depend on how ties are broken).

Exit status: 0 figures printed; 2 the input (arguments or file) is wrong or unusable.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import typing
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAYS_PER_UNIT = {"days": 1.0, "hours": 1.0 / 24.0, "seconds": 1.0 / 86400.0}
JOB_SIZES = (8, 16, 32, 64, 128, 256)
TYPE_LEVELS = ("Level", "Class", "Desc")


class InputError(Exception):
    """The input cannot be used; the message is printed on one line and the exit status is 2."""


@dataclass(frozen=True)
class Fault:
    node: str
    kind: str
    start: float
    end: float | None  # None: still open at the end of the file

    @property
    def level(self) -> str:
        return self.kind.split(" / ")[0]


@dataclass(frozen=True)
class Trace:
    faults: tuple[Fault, ...]
    unmatched_ends: int
    first_time: float
    last_time: float
    events: int


def quantile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default, Hyndman-Fan type 7)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    h = (len(sorted_values) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def pair_events(events: list[tuple[float, str, str, bool]]) -> tuple[list[Fault], int]:
    """(time, node, kind, is_start) in time order -> faults (FIFO per node and kind), unmatched
    ends."""
    open_starts: dict[tuple[str, str], list[float]] = defaultdict(list)
    faults: list[Fault] = []
    unmatched = 0
    for time, node, kind, is_start in events:
        key = (node, kind)
        if is_start:
            open_starts[key].append(time)
        elif open_starts[key]:
            faults.append(Fault(node, kind, open_starts[key].pop(0), time))
        else:
            unmatched += 1
    for (node, kind), starts in open_starts.items():
        faults.extend(Fault(node, kind, start, None) for start in starts)
    faults.sort(key=lambda f: (f.start, f.node, f.kind))
    return faults, unmatched


def _field(record: dict[str, Any], name: str, index: int) -> Any:
    if name not in record:
        raise InputError(f"event {index}: no '{name}' field")
    return record[name]


def parse_json(text: str) -> Trace:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc}") from None
    if not isinstance(data, list) or not data:
        raise InputError("expected a non-empty JSON array of events")
    events: list[tuple[float, str, str, bool]] = []
    for index, record in enumerate(data):
        if not isinstance(record, dict):
            raise InputError(f"event {index}: not an object")
        node = str(_field(record, "node_id", index))
        time = _field(record, "event_time", index)
        if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
            raise InputError(f"event {index}: event_time {time!r} is not a number")
        etype = _field(record, "event_type", index)
        if etype not in ("fault_start", "fault_end"):
            raise InputError(f"event {index}: unknown event_type {etype!r}")
        ftype = _field(record, "fault_type", index)
        if isinstance(ftype, dict):
            kind = " / ".join(str(ftype[k]) for k in TYPE_LEVELS if k in ftype)
        else:
            kind = str(ftype)
        if not kind:
            raise InputError(f"event {index}: empty fault_type")
        events.append((float(time), node, kind, etype == "fault_start"))
    events.sort(key=lambda e: e[0])  # stable: file order for equal times
    faults, unmatched = pair_events(events)
    return Trace(tuple(faults), unmatched, events[0][0], events[-1][0], len(events))


def _number(value: str, line: int, column: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"line {line}: {column} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InputError(f"line {line}: {column} {value!r} is not finite")
    return number


def parse_csv(text: str) -> Trace:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    if header != ["node", "start", "end", "kind"]:
        raise InputError(f"line 1: expected the header node,start,end,kind, got {header}")
    faults: list[Fault] = []
    times: list[float] = []
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 4:
            raise InputError(f"line {line}: expected 4 columns, got {len(row)}")
        node, start_s, end_s, kind = (cell.strip() for cell in row)
        if not node or not kind:
            raise InputError(f"line {line}: empty node or kind")
        start = _number(start_s, line, "start")
        end = _number(end_s, line, "end") if end_s else None
        if end is not None and end < start:
            raise InputError(f"line {line}: end {end_s} is before start {start_s}")
        faults.append(Fault(node, kind, start, end))
        times.extend([start] if end is None else [start, end])
    if not faults:
        raise InputError("no faults in the CSV")
    faults.sort(key=lambda f: (f.start, f.node, f.kind))
    return Trace(tuple(faults), 0, min(times), max(times), len(faults))


def repair_stats(hours: list[float]) -> dict[str, Any]:
    values = sorted(hours)
    if not values:
        return {"n": 0, "median": None, "p90": None, "mean": None, "max": None}
    return {"n": len(values), "median": quantile(values, 0.5), "p90": quantile(values, 0.9),
            "mean": sum(values) / len(values), "max": values[-1]}


def nodes_down(faults: Sequence[Fault], start: float, end: float) -> tuple[float, int]:
    """(total node down time, most nodes down at once), in the file's unit, within [start,end)."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for f in faults:
        lo, hi = max(f.start, start), min(end if f.end is None else f.end, end)
        if hi > lo:
            spans[f.node].append((lo, hi))
    total = 0.0
    edges: list[tuple[float, int]] = []
    for node_spans in spans.values():
        node_spans.sort()
        cur_lo, cur_hi = node_spans[0]
        merged: list[tuple[float, float]] = []
        for lo, hi in node_spans[1:]:
            if lo <= cur_hi:
                cur_hi = max(cur_hi, hi)
            else:
                merged.append((cur_lo, cur_hi))
                cur_lo, cur_hi = lo, hi
        merged.append((cur_lo, cur_hi))
        for lo, hi in merged:
            total += hi - lo
            edges += [(lo, 1), (hi, -1)]
    edges.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    down = peak = 0
    for _, step in edges:
        down += step
        peak = max(peak, down)
    return total, peak


def figures(trace: Trace, *, fleet_size: int, unit: str, window_start: float,
            window_end: float, job_sizes: Sequence[int] = JOB_SIZES, top_k: int = 3
            ) -> dict[str, Any]:
    days_per_unit = DAYS_PER_UNIT[unit]
    window_days = (window_end - window_start) * days_per_unit
    node_days = fleet_size * window_days
    counted = [f for f in trace.faults if window_start <= f.start < window_end]
    n = len(counted)
    by_level: dict[str, list[Fault]] = defaultdict(list)
    for f in counted:
        by_level[f.level].append(f)
    hours_per_unit = days_per_unit * 24.0

    def repairs(faults: Sequence[Fault]) -> list[float]:
        return [(f.end - f.start) * hours_per_unit for f in faults if f.end is not None]

    mtbf_node = node_days / n if n else None
    per_node = Counter(f.node for f in counted)
    top = sorted(per_node.items(), key=lambda item: (-item[1], item[0]))[:top_k]
    down_time, peak = nodes_down(trace.faults, window_start, window_end)
    return {
        "time_unit": unit,
        "window": {"start": window_start, "end": window_end, "days": window_days},
        "fleet_size": fleet_size,
        "node_days": node_days,
        "events": trace.events,
        "faults": n,
        "faults_closed": sum(1 for f in counted if f.end is not None),
        "faults_open": sum(1 for f in counted if f.end is None),
        "faults_outside_window": len(trace.faults) - n,
        "unmatched_ends": trace.unmatched_ends,
        "nodes_with_faults": len(per_node),
        "faults_per_node_day": n / node_days,
        "by_level": {
            level: {"faults": len(fs), "per_node_day": len(fs) / node_days,
                    "repair_hours": repair_stats(repairs(fs))}
            for level, fs in sorted(by_level.items())},
        "repair_hours": repair_stats(repairs(counted)),
        "mtbf_days": {
            "node": mtbf_node,
            "jobs": {str(size): None if mtbf_node is None else mtbf_node / size
                     for size in job_sizes}},
        "nodes_down": {"mean": down_time / (window_end - window_start), "max": peak},
        "top_nodes": {"k": top_k, "faults": sum(c for _, c in top),
                      "share": sum(c for _, c in top) / n if n else None,
                      "nodes": [[node, count] for node, count in top]},
    }


def _job_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"job sizes must be positive: {text!r}")
    return sizes


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        """One line on a bad argument (argparse would print the usage too), exit status 2."""
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path,
                        help="InfiniteHBD-format JSON, or a node,start,end,kind CSV")
    parser.add_argument("--fleet-size", type=int, required=True,
                        help="nodes in the fleet, including those that never failed")
    parser.add_argument("--format", choices=("auto", "json", "csv"), default="auto")
    parser.add_argument("--time-unit", choices=sorted(DAYS_PER_UNIT),
                        help="unit of the file's times (default: days for JSON, seconds for CSV)")
    parser.add_argument("--window-start", type=float, help="in the file's unit")
    parser.add_argument("--window-end", type=float, help="in the file's unit")
    parser.add_argument("--job-sizes", type=_job_sizes, default=JOB_SIZES)
    parser.add_argument("--top-k", type=int, default=3)
    return parser


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse arguments, read the file, return the figures; InputError on unusable input."""
    args = build_parser().parse_args(argv)
    path: Path = args.path
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    fmt = args.format
    if fmt == "auto":
        fmt = "json" if text.lstrip().startswith("[") else "csv"
    trace = parse_json(text) if fmt == "json" else parse_csv(text)
    unit = args.time_unit or ("days" if fmt == "json" else "seconds")
    start = args.window_start
    if start is None:
        start = 0.0 if fmt == "json" else min(f.start for f in trace.faults)
    end = trace.last_time if args.window_end is None else args.window_end
    if not end > start:
        raise InputError(f"empty window: end {end} is not after start {start}")
    nodes = len({f.node for f in trace.faults})
    if args.fleet_size < 1 or args.fleet_size < nodes:
        raise InputError(f"fleet size {args.fleet_size} is below the {nodes} nodes in the file")
    if args.top_k < 1:
        raise InputError("--top-k must be at least 1")
    result = figures(trace, fleet_size=args.fleet_size, unit=unit, window_start=start,
                     window_end=end, job_sizes=args.job_sizes, top_k=args.top_k)
    return {"source": str(path), "format": fmt, **result}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        result = run(argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
