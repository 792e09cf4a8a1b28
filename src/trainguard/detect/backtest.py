"""Backtest: run trainguard and the baselines on the same history and score them alike."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import detect
from trainguard.detect.scorecard import Scorecard, score
from trainguard.detect.truth import GroundTruth, align_nodes
from trainguard.errors import ConfigError, TrainguardError
from trainguard.telemetry.frame import Telemetry

__all__ = ["BASELINES", "BacktestResult", "run_backtest"]

log = logging.getLogger(__name__)

BASELINES = ("static", "ecod", "iforest")
"""Baselines `run_backtest` knows: static DCGM-style rules and PyOD's ECOD / IForest."""


@dataclass(frozen=True, slots=True)
class BacktestResult:
    """Scorecards (trainguard first) and every detector's alerts."""

    cards: tuple[Scorecard, ...]
    alerts: dict[str, tuple[AlertEpisode, ...]]
    skipped: tuple[str, ...] = ()
    """Baselines that could not run, with the reason."""


def run_backtest(tel: Telemetry, truth: GroundTruth, *, cfg: DetectorConfig | None = None,
                 baselines: Sequence[str] = ("static", "ecod"),
                 progress: Callable[[str, int, int], None] | None = None) -> BacktestResult:
    """Detect on `tel`, run the named baselines, score all against `truth`."""
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ConfigError(f"unknown baseline {unknown[0]!r} (known: {', '.join(BASELINES)})")
    truth, renamed = align_nodes(truth, tel.nodes)
    if renamed:
        log.info("ground truth: %d node names mapped to the telemetry's names", renamed)
    span = (float(tel.times[0]), float(tel.times[-1]) + tel.step_s)
    n_nodes = len(tel.nodes)

    def prog(name: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(name, done, total)

    alerts: dict[str, tuple[AlertEpisode, ...]] = {
        "trainguard": tuple(detect(tel, cfg, progress=prog("trainguard")))}
    skipped: list[str] = []
    for name in baselines:
        try:
            alerts[_label(name)] = tuple(_baseline(name, tel))
        except TrainguardError as exc:
            skipped.append(f"{name}: {exc}")
            log.warning("baseline %s skipped: %s", name, exc)
    cards = tuple(score(a, truth, span, n_nodes, name=name) for name, a in alerts.items())
    return BacktestResult(cards, alerts, tuple(skipped))


def _label(name: str) -> str:
    return {"static": "static rules", "ecod": "PyOD ECOD", "iforest": "PyOD IForest"}[name]


def _baseline(name: str, tel: Telemetry) -> list[AlertEpisode]:
    from trainguard.detect import baselines as b

    if name == "static":
        return list(b.static_rules(tel))
    return list(b.anomaly_baseline(tel, method="iforest" if name == "iforest" else "ecod"))
