"""Early warnings folded into a block (detect/signals/precursor.py)."""

from __future__ import annotations

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import LEAD_COUNTER, LEAD_GAUGE, LEAD_PRECURSOR
from trainguard.detect.signals.precursor import PrecursorConfig, Signals, fold

CFG = PrecursorConfig.of(DetectorConfig(score_on=9.0, top_signals=2))
RULE = Signal("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "3", 5.0, "recurring")


def test_no_hit_hands_the_block_on_untouched() -> None:
    signals: Signals = {1: (RULE,)}
    score, lead = np.array([1.0, 2.0]), np.zeros(2, dtype=np.int8)
    got = fold(CFG, None, score, signals, set(), lead)
    assert got[0] is score and got[1] is signals and got[2] is lead
    assert fold(CFG, [], score, signals, set(), lead)[0] is score


def test_a_hit_raises_the_score_leads_and_comes_first() -> None:
    other = Signal("DCGM_FI_DEV_GPU_TEMP", "3", 4.0)
    extra = Signal("DCGM_FI_DEV_POWER_USAGE", None, 3.0)
    score = np.array([np.nan, 12.0, 2.0])
    signals: Signals = {1: (other, RULE, extra)}
    lead = np.array([LEAD_GAUGE, LEAD_COUNTER, LEAD_GAUGE], dtype=np.int8)
    s, sig, ld = fold(CFG, [(0, RULE), (1, RULE), (2, RULE)], score, signals, {2}, lead)
    assert s.tolist() == [9.0, 12.0, 2.0]  # at least score_on; a quiet node is left alone
    assert ld.tolist() == [LEAD_PRECURSOR, LEAD_PRECURSOR, LEAD_GAUGE]
    assert sig[0] == (RULE,) and sig[1] == (RULE, other) and 2 not in sig  # top_signals = 2
    assert np.isnan(score[0]) and signals == {1: (other, RULE, extra)}  # inputs unchanged
    assert lead[0] == LEAD_GAUGE


def test_a_hit_on_a_node_beyond_the_scores_is_ignored() -> None:
    s, _, ld = fold(CFG, [(5, RULE)], np.array([1.0]), {}, set(), np.zeros(1, dtype=np.int8))
    assert s.tolist() == [1.0] and ld.tolist() == [LEAD_GAUGE]
