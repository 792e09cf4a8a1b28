"""Early-warning figures of one or more backtests on held-out clusters (issue #30).

For each cluster directory (with `labels.jsonl`) and the alerts that `trainguard backtest
--alerts-out` wrote for it, counts, with the scorecard's rules (docs/backtest.md):

* failures, detected (an alert onset on the node in [t_xid - 3 h, t_xid + 5 min], not within
  5 min of an application XID there);
* early 3 h: an onset in [t_xid - 3 h, t_xid - 1 min]; early 48 h: in [t_xid - 48 h, t_xid - 1 min];
* false alarms per day per 64 nodes, strictly (onsets outside every [t_xid - 3 h, t_xid + 2 h]
  of the node and its maintenance windows, or within 5 min of an application XID on the node)
  and leniently (failure windows widened to [t_xid - 48 h, t_xid + 2 h]). The lenient count
  is what `trainguard backtest` calls false positives since issue #30 (an alert 3-48 h before
  a failure on its node is a long-lead warning there); the strict one is its count before.

    python benchmarks/heldout/score_early.py /tmp/d1 /tmp/d1.alerts.jsonl [CLUSTER ALERTS ...]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

H = 3600.0


@dataclass(frozen=True)
class Figures:
    failures: int
    detected: int
    early_3h: int
    early_48h: int
    fa_strict: int
    fa_lenient: int
    node_days: float

    def per64(self, n: int) -> float:
        return n / self.node_days * 64 if self.node_days else 0.0


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _span_days(cluster: Path) -> tuple[int, float]:
    s = json.loads((cluster / "summary.json").read_text())
    return int(s["nodes"]), float(s["days"])


def score(cluster: Path, alerts_path: Path) -> Figures:
    labels = _read(cluster / "labels.jsonl")
    alerts = _read(alerts_path)
    fails = [x for x in labels if x["type"] == "failure"]
    maint = [x for x in labels if x["type"] == "maintenance"]
    app = [x for x in labels if x["type"] == "app_xid"]
    # Style b knows nodes only by their exporter's address: its alerts name the instance.
    by_instance = {str(x["instance"]): str(x["node"]) for x in labels if "instance" in x}
    on: dict[str, list[float]] = {}
    for a in alerts:
        on.setdefault(by_instance.get(a["node"], a["node"]), []).append(float(a["start"]))

    def at_app(node: str, x: float) -> bool:
        return any(x - 300 <= float(p["time"]) <= x + 300 for p in app if p["node"] == node)

    det = e3 = e48 = 0
    for f in fails:
        t = float(f["time"])
        xs = [x for x in on.get(f["node"], []) if not at_app(f["node"], x)]
        det += any(t - 3 * H <= x <= t + 300 for x in xs)
        e3 += any(t - 3 * H <= x <= t - 60 for x in xs)
        e48 += any(t - 48 * H <= x <= t - 60 for x in xs)

    def false_alarms(before_h: float) -> int:
        n = 0
        for node, xs in on.items():
            for x in xs:
                if at_app(node, x):
                    n += 1
                    continue
                if any(float(f["time"]) - before_h * H <= x <= float(f["time"]) + 2 * H
                       for f in fails if f["node"] == node):
                    continue
                if any(float(m["start"]) <= x <= float(m["end"]) for m in maint
                       if m["node"] == node):
                    continue
                n += 1
        return n

    nodes, days = _span_days(cluster)
    return Figures(len(fails), det, e3, e48, false_alarms(3), false_alarms(48), nodes * days)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print("usage: score_early.py CLUSTER ALERTS [CLUSTER ALERTS ...]", file=sys.stderr)
        return 2
    tot = [0] * 6
    nd = 0.0
    for c, a in zip(argv[::2], argv[1::2], strict=True):
        f = score(Path(c), Path(a))
        print(f"{c}: failures {f.failures}, detected {f.detected}, early<=3h {f.early_3h}, "
              f"early<=48h {f.early_48h}, FA/day/64 strict {f.per64(f.fa_strict):.2f} "
              f"({f.fa_strict}), lenient {f.per64(f.fa_lenient):.2f} ({f.fa_lenient})")
        for i, v in enumerate((f.failures, f.detected, f.early_3h, f.early_48h, f.fa_strict,
                               f.fa_lenient)):
            tot[i] += v
        nd += f.node_days
    n = max(tot[0], 1)
    print(f"TOTAL: failures {tot[0]}, detected {tot[1]} ({tot[1] / n:.0%}), early<=3h {tot[2]} "
          f"({tot[2] / n:.0%}), early<=48h {tot[3]} ({tot[3] / n:.0%}), FA/day/64 strict "
          f"{tot[4] / nd * 64:.2f} ({tot[4]}), lenient {tot[5] / nd * 64:.2f} ({tot[5]}), "
          f"{nd:.0f} node-days")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
