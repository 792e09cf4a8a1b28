"""Entry points: `generate` (arrays per window) and `simulate_to_dir` (files on disk).

    >>> cfg = SimConfig(nodes=2, gpus_per_node=2, days=0.1, seed=3)
    >>> chunk = next(generate(cfg))
    >>> chunk.metrics[0].spec.name, chunk.metrics[0].values.shape[0]
    ('DCGM_FI_DEV_GPU_UTIL', 4)
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard import __version__
from trainguard.outdirs import MAX_NEW_LEVELS, make_dir, missing_levels
from trainguard.simulate.config import WINDOW_S, SimConfig
from trainguard.simulate.metrics import ALL_METRICS, SimChunk
from trainguard.simulate.model import WindowModel
from trainguard.simulate.scenario import Scenario, build_scenario
from trainguard.simulate.space import NotEnoughSpace, check_space
from trainguard.simulate.writers import (
    OpenMetricsWriter,
    kernel_logs,
    label_records,
    write_jsonl,
)
from trainguard.valueorigin import InvalidValue

__all__ = ["OutDirNotEmpty", "ProgressFn", "SimSummary", "generate", "simulate_to_dir"]

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]
"""Called after each window as progress(done, total)."""


def generate(cfg: SimConfig, scenario: Scenario | None = None) -> Iterator[SimChunk]:
    """The run's telemetry as one `SimChunk` per epoch-aligned 2-hour window, in time order."""
    yield from WindowModel(scenario or build_scenario(cfg)).chunks()


@dataclass(frozen=True, slots=True)
class SimSummary:
    """What `simulate_to_dir` wrote."""

    out_dir: str
    windows: int
    samples: int
    metric_bytes: int
    total_bytes: int
    failures: int
    app_xids: int
    maintenances: int
    benign: int
    jobs: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def simulate_to_dir(cfg: SimConfig, out: str | Path, progress: ProgressFn | None = None, *,
                    compress: bool = False, overwrite: bool = False,
                    free_space: Callable[[Path], int] | None = None) -> SimSummary:
    """Write metrics/, kernel/, labels.jsonl and manifest.json for `cfg` under `out`.

    `out` must be missing (its parent must exist: only `out` itself is created) or empty
    unless `overwrite` (then the simulator's own outputs in it are replaced). Before anything
    is written or deleted, the estimated size (`trainguard.simulate.space`) is checked against
    the free space there: `NotEnoughSpace` when it would not fit with a margin. `free_space`
    replaces the free-space probe (path -> bytes; tests).
    """
    t0 = time.perf_counter()
    out = Path(out)
    replaced = _check_out(out, overwrite)
    space = check_space(cfg, out, compress=compress, replaced=replaced, free=free_space)
    if not space.fits:
        raise NotEnoughSpace(space)
    _prepare(out, replaced)
    scenario = build_scenario(cfg)
    metrics_dir = out / "metrics"
    metrics_dir.mkdir()
    writer = OpenMetricsWriter(metrics_dir, compress=compress, job_label=cfg.job_label)
    windows = samples = metric_bytes = 0
    files: list[str] = []
    total = cfg.n_windows
    for i, chunk in enumerate(generate(cfg, scenario), 1):
        path, size, n = writer.write(chunk)
        files.append(f"metrics/{path.name}")
        windows, samples, metric_bytes = windows + 1, samples + n, metric_bytes + size
        log.debug("window %s: %d samples, %d bytes", path.name, n, size)
        if progress is not None:
            progress(i, total)
    kernel_dir = out / "kernel"
    kernel_dir.mkdir()
    for node, lines in kernel_logs(scenario).items():
        (kernel_dir / f"{node}.log").write_text("".join(lines), encoding="utf-8")
    labels = label_records(scenario)
    write_jsonl(out / "labels.jsonl", labels)
    counts = {t: sum(1 for r in labels if r["type"] == t)
              for t in ("failure", "app_xid", "maintenance", "benign", "scrape_gap", "job")}
    manifest = {
        "generator": f"trainguard {__version__} simulate",
        "config": cfg.to_dict(),
        "seed": cfg.seed,
        "time_range": {"start": cfg.start_s, "end": cfg.end_s,
                       "first_window": cfg.first_window_s, "window_s": WINDOW_S,
                       "interval_s": cfg.interval_s},
        "nodes": list(scenario.fleet.node_names),
        "gpu_pci": list(scenario.fleet.pci),
        "gpu_uuids": {n: list(u) for n, u in zip(scenario.fleet.node_names,
                                                 scenario.fleet.uuids, strict=True)},
        "counts": {**counts, "windows": windows, "samples": samples},
        "metrics": [{"name": m.name, "sample_name": m.sample_name, "type": m.type_word,
                     "kind": m.kind.value, "per_gpu": m.per_gpu, "help": m.help,
                     "variants": [dict(v) for v in m.variants if v]} for m in ALL_METRICS],
        "files": {"metrics": files, "kernel": sorted(f"kernel/{n}.log"
                                                      for n in scenario.fleet.node_names),
                  "labels": "labels.jsonl"},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    total_bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return SimSummary(str(out), windows, samples, metric_bytes, total_bytes,
                      len(scenario.failures), len(scenario.app_xids), counts["maintenance"],
                      len(scenario.benign), counts["job"], time.perf_counter() - t0)


_OWN = ("metrics", "kernel", "labels.jsonl", "manifest.json")


class OutDirNotEmpty(InvalidValue):
    """`out` holds files and `overwrite` was not given."""

    def __init__(self, out: Path) -> None:
        super().__init__("simulate.out", f"{out} is not empty (overwrite replaces a previous "
                                         "simulation)")
        self.out = out


def _check_out(out: Path, overwrite: bool) -> list[Path]:
    """Refuse an unusable `out` before anything is touched; the own outputs `overwrite` replaces."""
    if out.exists() and not out.is_dir():
        raise InvalidValue("simulate.out", f"{out} exists and is not a directory")
    missing = missing_levels(out)
    if len(missing) > MAX_NEW_LEVELS:
        raise InvalidValue("simulate.out", f"{out} cannot be created: {missing[0]} does not "
                                           "exist (only the output directory itself is "
                                           "created; a typo?)")
    if not out.is_dir() or not any(out.iterdir()):
        return []
    if not overwrite:
        raise OutDirNotEmpty(out)
    return [out / name for name in _OWN if (out / name).exists()]


def _prepare(out: Path, replaced: list[Path]) -> None:
    for p in replaced:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    try:
        make_dir(out)
    except OSError as exc:
        raise InvalidValue("simulate.out", f"{out} cannot be created: "
                                           f"{exc.strerror or exc}") from exc
