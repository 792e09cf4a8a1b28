"""Record the detector's per-block scores once, then replay episode settings over them.

Tuning thresholds and persistence does not need the detector re-run per candidate: the scoring
(peer residuals, learned baselines, calibration) does not depend on them, only the episode
tracker does. So:

1. run the detector once over the history with a :class:`RecordingTracker` in place of its
   episode tracker: it stores every call the scorer makes (hard evidence, each block's node
   scores with what leads each one, hard-episode expiry) as a :class:`Trace`;
2. :func:`replay` feeds a trace to a fresh :class:`EpisodeTracker` built from a candidate config,
   giving the alerts that config would have raised.

One approximation: the scorer mutes a metric that deviates on many nodes at once using half of
`score_on`, so a replay with another `score_on` is not bit-identical to a real run. `tune`
therefore measures its chosen config by a real detector run.

    >>> trace = Trace(("n1",), ())
    >>> replay(trace, DetectorConfig())
    []
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.alerts import AlertEpisode, Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import Detector, run_detector
from trainguard.detect.episodes import EpisodeTracker
from trainguard.telemetry.frame import FloatArray, Telemetry

__all__ = ["ExpireStep", "HardStep", "RecordingTracker", "SoftStep", "Trace", "record",
           "replay"]


@dataclass(frozen=True, slots=True, eq=False)
class SoftStep:
    """One scoring block: node scores (index as `Trace.nodes`; NaN: no data)."""

    t: float
    score: FloatArray
    lead: np.ndarray | None
    """What leads each node's score (the tracker's `LEAD_*` codes), as the scorer gave it."""
    signals: dict[int, tuple[Signal, ...]]
    """Signals of the nodes at or above the recording config's `score_on` (for display)."""


@dataclass(frozen=True, slots=True)
class HardStep:
    """Hard evidence on node index `node` at `t`."""

    node: int
    t: float
    signal: Signal
    severity: float


@dataclass(frozen=True, slots=True)
class ExpireStep:
    """End of a block: hard episodes older than the hard cool-down close."""

    t: float


Step = SoftStep | HardStep | ExpireStep


@dataclass(frozen=True, slots=True)
class Trace:
    """What the scorer told the episode tracker over a whole history, in order."""

    nodes: tuple[str, ...]
    steps: tuple[Step, ...]

    @property
    def blocks(self) -> int:
        return sum(isinstance(s, SoftStep) for s in self.steps)


@dataclass
class RecordingTracker(EpisodeTracker):
    """An :class:`EpisodeTracker` that also records every call (see the module docstring)."""

    steps: list[Step] = field(default_factory=list)

    def soft_block(self, t: float, score: FloatArray, signals: dict[int, tuple[Signal, ...]],
                   quiet: set[int], lead: np.ndarray | None = None) -> None:
        kept = None if lead is None else np.array(lead)  # a copy, its own dtype
        self.steps.append(SoftStep(t, np.array(score, dtype=np.float64), kept, dict(signals)))
        super().soft_block(t, score, signals, quiet, lead)

    def hard_event(self, i: int, t: float, signal: Signal, severity: float) -> None:
        self.steps.append(HardStep(i, t, signal, severity))
        super().hard_event(i, t, signal, severity)

    def expire_hard(self, t: float) -> None:
        self.steps.append(ExpireStep(t))
        super().expire_hard(t)

    def trace(self) -> Trace:
        return Trace(tuple(self.nodes), tuple(self.steps))


def record(tel: Telemetry, cfg: DetectorConfig, *,
           progress: Callable[[int, int], None] | None = None
           ) -> tuple[Trace, list[AlertEpisode]]:
    """Run the detector over `tel` once, recording its trace; also returns the alerts `cfg`
    itself raises (the same as :func:`trainguard.detect.detector.detect`)."""
    det = Detector(cfg)
    # The scorer receives the tracker from the detector on every chunk: swapping it here is
    # enough. `nodes` must stay the layout's own list, which grows as nodes appear.
    rec = RecordingTracker(det.cfg, det.layout.nodes)
    det.tracker = rec
    alerts = run_detector(det, tel, progress=progress)
    return rec.trace(), alerts


def replay(trace: Trace, cfg: DetectorConfig) -> list[AlertEpisode]:
    """The alert episodes `cfg`'s episode settings give over a recorded trace."""
    tracker = EpisodeTracker(cfg, list(trace.nodes))
    for step in trace.steps:
        if isinstance(step, SoftStep):
            tracker.soft_block(step.t, step.score, step.signals, tracker.quiet(step.t),
                               step.lead)
        elif isinstance(step, HardStep):
            tracker.hard_event(step.node, step.t, step.signal, step.severity)
        else:
            tracker.expire_hard(step.t)
    return tracker.finish()
