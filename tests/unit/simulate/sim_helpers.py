"""Shared by the simulator tests: a small, event-dense config and an OpenMetrics reader."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainguard.simulate import SimConfig, SimSummary

# Many failures / app XIDs / maintenances in a short span so every code path runs.
SMALL = SimConfig(nodes=6, gpus_per_node=2, days=0.75, seed=11, interval_s=60,
                  start_s=1_731_891_000, failures_per_day=8, app_xids_per_day=8,
                  maintenances_per_day=10, benign_per_day=40, scrape_gaps_per_day=10,
                  missing_sample_prob=1e-3)

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][\w:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+) (?P<ts>\d+)$")


@dataclass
class Parsed:
    """One OpenMetrics file: families in order, and per series its (ts, value) samples."""

    families: list[str]
    types: dict[str, str]
    series: dict[tuple[str, str], list[tuple[int, float]]]
    last_line: str


def read_text(path: Path) -> str:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode()
    return path.read_text()


def parse_om(path: Path) -> Parsed:
    families: list[str] = []
    types: dict[str, str] = {}
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    lines = read_text(path).splitlines()
    current = None
    for line in lines:
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"family {name} declared twice (interleaved)"
            families.append(name)
            types[name] = kind
            current = name
        elif line.startswith("# HELP ") or line == "# EOF":
            continue
        else:
            m = _SAMPLE.match(line)
            assert m, f"bad sample line {line!r}"
            assert m["name"] in (current, f"{current}_total"), (
                f"sample {m['name']} outside its family {current}")
            series.setdefault((m["name"], m["labels"]), []).append(
                (int(m["ts"]), float(m["value"])))
    return Parsed(families, types, series, lines[-1])


def labels_of(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


@dataclass
class SimRun:
    out: Path
    summary: SimSummary
    labels: list[dict[str, Any]]
    manifest: dict[str, Any]

    _index: dict[tuple[str, str, str], tuple[list[int], list[float]]] | None = None

    def gpu_series(self, metric: str, node: str, gpu: str) -> tuple[np.ndarray, np.ndarray]:
        """All (times, values) of one GPU series over every window file (parsed once)."""
        if self._index is None:
            index: dict[tuple[str, str, str], tuple[list[int], list[float]]] = {}
            for f in sorted((self.out / "metrics").iterdir()):
                for (name, lab), samples in parse_om(f).series.items():
                    d = labels_of(lab)
                    if "gpu" in d:
                        ts, vs = index.setdefault((name, d["Hostname"], d["gpu"]), ([], []))
                        ts += [t for t, _ in samples]
                        vs += [v for _, v in samples]
            self._index = index
        ts, vs = self._index.get((metric, node, gpu), ([], []))
        return np.array(ts), np.array(vs)
