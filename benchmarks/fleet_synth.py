"""Synthetic node fault trace in the InfiniteHBD-Trace format (numpy, seeded).

Writes a JSON array of ``{"node_id", "event_time", "event_type", "fault_type"}`` events, the
shape of StepFun's public trace (see tests/data/fleet/infinitehbd/FORMAT.md), for tests and the
benchmark: the real trace has no licence and cannot be stored here.

    python benchmarks/fleet_synth.py --nodes 400 --days 365 --out /tmp/fleet.json \\
        [--lemons 5] [--bursts 3] [--seed 1]

Model (all choices documented, nothing tuned on the real trace):

- ``node_id``: a random version-4 UUID per node; only nodes with at least one fault appear.
- ``event_time``: days from 0, rounded to 1e-4 day (~8.6 s) like the upstream file.
- ``fault_type``: drawn from a small made-up catalogue (``CATALOGUE``) by weight.
- each (node, fault type) is an alternating renewal process: up for an exponential time (rate
  ``rate x weight`` per node-day, ``x lemon_factor`` on lemon nodes), then down for a lognormal
  repair time (median ``repair_median_h`` hours, log-sd ``repair_sigma``). So one node never
  has two overlapping faults of the same type (different types may overlap), and the realised
  rate is slightly below ``rate`` (time spent down does not fail again).
- lemons: ``lemons`` nodes picked at random whose rate is ``lemon_factor`` times the rest.
- bursts: ``bursts`` instants, uniform in the span; each hits ``burst_fraction`` of the fleet
  (at least 2 nodes) with one fault type within ``BURST_JITTER_DAYS`` (correlated faults, which
  a Poisson model does not expect). A burst fault that would overlap or touch a fault of the
  same node and type is dropped, as is a fault that rounding to 1e-4 day would make touch the
  one before (both counted in ``dropped``).
- a fault still down at ``days`` has a ``fault_start`` and no ``fault_end`` (open).
- events are sorted by time; at equal times an end comes before a start.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# (Level, Class, Desc), weight: made-up names, in the three-level shape of the real trace.
CATALOGUE: tuple[tuple[tuple[str, str, str], float], ...] = (
    (("Hardware Failure", "GPU", "GPU ECC Uncorrectable"), 0.22),
    (("Hardware Failure", "GPU", "GPU Fell Off Bus"), 0.08),
    (("Hardware Failure", "Network", "Link Flapping"), 0.12),
    (("Hardware Failure", "Power", "PSU Fault"), 0.06),
    (("Hardware Failure", "Cooling", "Fan Speed Low"), 0.06),
    (("Software Failure", "Driver", "Driver Hang"), 0.06),
    (("Other Failure", "Health Check", "Burn-in Failed"), 0.18),
    (("Other Failure", "Unknown", "Unknown"), 0.22),
)
RESOLUTION_DAYS = 1e-4
BURST_JITTER_DAYS = 0.02


@dataclass(frozen=True)
class SynthTrace:
    events: list[dict[str, Any]]
    nodes: tuple[str, ...]          # every node of the fleet, lemons included
    lemon_nodes: tuple[str, ...]
    burst_times: tuple[float, ...]
    faults: int
    open_faults: int
    dropped: int                    # faults dropped to keep a node's same-type faults apart


def _uuid(rng: np.random.Generator) -> str:
    return str(uuid.UUID(bytes=rng.bytes(16), version=4))


def _round(t: float) -> float:
    return round(t, 4)


def generate(nodes: int, days: float, *, rate: float = 0.004, repair_median_h: float = 20.0,
             repair_sigma: float = 1.5, lemons: int = 0, lemon_factor: float = 10.0,
             bursts: int = 0, burst_fraction: float = 0.1, seed: int = 0) -> SynthTrace:
    if nodes < 1 or days <= 0 or rate < 0 or repair_median_h <= 0 or repair_sigma < 0:
        raise ValueError("need nodes >= 1, days > 0, rate >= 0, repair median > 0, sigma >= 0")
    if not 0 <= lemons <= nodes or lemon_factor <= 0 or bursts < 0:
        raise ValueError("need 0 <= lemons <= nodes, lemon factor > 0, bursts >= 0")
    if not 0 < burst_fraction <= 1:
        raise ValueError("burst fraction must be in (0, 1]")
    rng = np.random.default_rng(seed)
    node_ids = tuple(_uuid(rng) for _ in range(nodes))
    lemon_idx = sorted(int(i) for i in rng.choice(nodes, size=lemons, replace=False))
    lemon_set = set(lemon_idx)
    kinds = [k for k, _ in CATALOGUE]
    weights = np.array([w for _, w in CATALOGUE]) / sum(w for _, w in CATALOGUE)
    mu = float(np.log(repair_median_h / 24.0))

    def repair() -> float:
        return max(float(rng.lognormal(mu, repair_sigma)), RESOLUTION_DAYS)

    # (node index, kind index) -> [(start, end)], end may pass `days` (then open)
    faults: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for n in range(nodes):
        node_rate = rate * (lemon_factor if n in lemon_set else 1.0)
        for k, w in enumerate(weights):
            lam = node_rate * float(w)
            if lam <= 0:
                continue
            t = float(rng.exponential(1.0 / lam))
            while t < days:
                end = t + repair()
                faults[(n, k)].append((t, end))
                t = end + float(rng.exponential(1.0 / lam))

    burst_times = sorted(float(t) for t in rng.uniform(0, days, size=bursts))
    dropped = 0
    for t0 in burst_times:
        k = int(rng.choice(len(kinds), p=weights))
        hit = rng.choice(nodes, size=min(nodes, max(2, round(burst_fraction * nodes))),
                         replace=False)
        for n in sorted(int(i) for i in hit):
            start = min(t0 + float(rng.uniform(0, BURST_JITTER_DAYS)), days - RESOLUTION_DAYS)
            span = (start, start + repair())
            if any(s <= span[1] and span[0] <= e for s, e in faults[(n, k)]):
                dropped += 1
                continue
            faults[(n, k)].append(span)

    events: list[tuple[float, int, str, tuple[str, str, str]]] = []
    count = open_count = 0
    for (n, k), spans in faults.items():
        last_end = -1.0
        for start, end in sorted(spans):
            s = _round(start)
            e = max(_round(end), _round(s + RESOLUTION_DAYS))
            if s <= last_end or s >= days:  # rounding merged it into the previous one
                dropped += 1
                continue
            count += 1
            events.append((s, 1, node_ids[n], kinds[k]))
            if e < days:
                events.append((e, 0, node_ids[n], kinds[k]))
                last_end = e
            else:
                open_count += 1
                last_end = float("inf")
    events.sort(key=lambda ev: (ev[0], ev[1], ev[2], ev[3]))
    out = [{"node_id": node, "event_time": t,
            "event_type": "fault_start" if is_start else "fault_end",
            "fault_type": {"Level": kind[0], "Class": kind[1], "Desc": kind[2]}}
           for t, is_start, node, kind in events]
    return SynthTrace(out, node_ids, tuple(node_ids[i] for i in lemon_idx),
                      tuple(burst_times), count, open_count, dropped)


def write(path: Path, trace: SynthTrace) -> None:
    path.write_text(json.dumps(trace.events, indent=4), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--days", type=float, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rate", type=float, default=0.004, help="faults per node-day")
    ap.add_argument("--repair-median-hours", type=float, default=20.0)
    ap.add_argument("--repair-sigma", type=float, default=1.5, help="log-sd of repair times")
    ap.add_argument("--lemons", type=int, default=0)
    ap.add_argument("--lemon-factor", type=float, default=10.0)
    ap.add_argument("--bursts", type=int, default=0)
    ap.add_argument("--burst-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        trace = generate(args.nodes, args.days, rate=args.rate,
                         repair_median_h=args.repair_median_hours,
                         repair_sigma=args.repair_sigma, lemons=args.lemons,
                         lemon_factor=args.lemon_factor, bursts=args.bursts,
                         burst_fraction=args.burst_fraction, seed=args.seed)
        write(args.out, trace)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {trace.faults} faults ({trace.open_faults} open) on "
          f"{len({e['node_id'] for e in trace.events})} of {args.nodes} nodes over {args.days:g}"
          f" days; lemons {len(trace.lemon_nodes)}, bursts {len(trace.burst_times)}, "
          f"dropped {trace.dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
