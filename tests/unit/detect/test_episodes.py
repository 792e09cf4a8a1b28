"""Episode rules (detect/episodes.py) on hand-made block scores: persistence, accumulated evidence
from specific deviations, early-warning findings."""

from __future__ import annotations

import numpy as np

from trainguard.detect.alerts import AlertEpisode, Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import (
    LEAD_ACTIVITY,
    LEAD_COUNTER,
    LEAD_GAUGE,
    LEAD_PRECURSOR,
    EpisodeTracker,
)

CFG = DetectorConfig()
BLOCK = CFG.block_s


def _run(scores: list[float], lead: int, finding: Signal | None = None) -> list[AlertEpisode]:
    """One node; block b has score scores[b], led by `lead`."""
    tr = EpisodeTracker(CFG, ["n0"])
    sig = Signal("m", "0", 1.0)
    for b, s in enumerate(scores):
        signals = {0: ((finding,) if finding and lead == LEAD_PRECURSOR else (sig,))} \
            if s >= CFG.score_on else {}
        tr.soft_block(float(b * BLOCK), np.array([s]), signals, set(),
                      np.array([lead], dtype=np.int8))
    return tr.finish()


def test_a_stalling_gpu_pages_on_intermittent_spikes_a_single_spike_does_not() -> None:
    spikes = [0.0] * 20
    for b in (5, 8, 11, 14, 17):  # a spike every 6 minutes
        spikes[b] = 50.0
    eps = _run(spikes, LEAD_ACTIVITY)
    # each spike adds 20 - 4, each quiet block takes 4: 16, 24, 32, then 40 at the fourth
    assert [e.start for e in eps] == [14 * BLOCK]
    one = [0.0] * 20
    one[5] = 50.0
    assert _run(one, LEAD_ACTIVITY) == []


def test_gauge_spikes_need_persistence_not_accumulation() -> None:
    spikes = [0.0] * 20
    for b in (5, 8, 11):
        spikes[b] = 50.0
    assert _run(spikes, LEAD_GAUGE) == []
    sustained = [0.0] * 5 + [12.0] * CFG.persist_gauge_blocks
    assert [e.start for e in _run(sustained, LEAD_GAUGE)] == [
        (5 + CFG.persist_gauge_blocks - 1) * BLOCK]


def test_counter_led_blocks_accumulate_faster() -> None:
    eps = _run([0.0] * 3 + [14.0, 0.0, 14.0, 0.0], LEAD_COUNTER)  # 10, 6, 16, 12: < 20
    assert eps == []
    eps = _run([0.0] * 3 + [24.0, 0.0, 24.0], LEAD_COUNTER)  # 16 - 4 + 16 = 28 >= 20
    assert [e.start for e in eps] == [5 * BLOCK]


def test_an_early_warning_finding_pages_at_once_and_stays_the_first_signal() -> None:
    finding = Signal("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "3", 5.0, "error count recurring")
    tr = EpisodeTracker(CFG, ["n0"])
    tr.soft_block(0.0, np.array([CFG.score_on]), {0: (finding,)}, set(),
                  np.array([LEAD_PRECURSOR], dtype=np.int8))
    later = Signal("DCGM_FI_DEV_MEMORY_TEMP", "3", 30.0)
    tr.soft_block(float(BLOCK), np.array([30.0]), {0: (later,)}, set(),
                  np.array([LEAD_GAUGE], dtype=np.int8))
    (ep,) = tr.finish()
    assert ep.start == 0.0 and ep.peak_score == 30.0
    assert ep.signals[:2] == (finding, later)


def test_quiet_after_hard_evidence_suppresses_findings() -> None:
    finding = Signal("x", "0", 1.0, "error count recurring")
    tr = EpisodeTracker(CFG, ["n0"])
    tr.hard_event(0, 0.0, Signal("DCGM_FI_DEV_XID_ERRORS", "0", 79.0, "XID 79"), 100.0)
    tr.soft_block(float(BLOCK), np.array([CFG.score_on]), {0: (finding,)}, tr.quiet(BLOCK),
                  np.array([LEAD_PRECURSOR], dtype=np.int8))
    assert [e.kind.value for e in tr.finish()] == ["hard"]
