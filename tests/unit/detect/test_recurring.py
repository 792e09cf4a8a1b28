"""The window test of the recurring-count rule (detect/recurring.py), alone: how many blocks
with events a window needs against a series' usual rate, and how the burst window's stricter
confidence keeps a noisy link's clumps from passing for a quiet link's bursts."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.detect.config import DetectorConfig
from trainguard.detect.recurring import RecurringCounts, Window, window_hits

CFG = DetectorConfig()
SHORT, BURST = RecurringCounts(CFG).windows()


def _mask(blocks_with_events: int) -> np.ndarray:
    return np.array([[(1 << blocks_with_events) - 1]], dtype=np.int64)


def _hits(win: Window, events: int, usual_per_window: float) -> list[tuple[int, int, int]]:
    rate = np.array([[usual_per_window / win.blocks]])
    return window_hits(_mask(events), rate, np.array([[True]]), win,
                       CFG.precursor_background_ratio)


def test_the_defaults_give_a_30_min_window_and_a_90_min_burst_window() -> None:
    assert (SHORT.blocks, SHORT.events, SHORT.confidence) == (15, 4, 0.999)
    assert (BURST.blocks, BURST.events, BURST.confidence) == (45, 3, 0.999999)
    assert BURST.floor * BURST.blocks == pytest.approx(SHORT.floor * SHORT.blocks)


def test_a_series_quiet_for_days_warns_on_three_bursts_and_not_on_two() -> None:
    # One block with events in about 4,500 before (0.01 expected in 45 blocks).
    assert _hits(BURST, 3, 0.01) == [(0, 0, 3)]
    assert _hits(BURST, 2, 0.01) == []
    assert _hits(BURST, 3, 0.0) == [(0, 0, 3)]


@pytest.mark.parametrize(("usual", "needed"), [(0.09, 5), (0.6, 8)])
def test_a_gpu_that_counts_now_and_then_needs_more_bursts(usual: float, needed: int) -> None:
    """0.09 usual in 45 blocks is a GPU that counts 1.4 times a day: three blocks with events
    are a 1-in-9,000 chance for it, tested 720 times a day, which the short window's 0.999 would
    pass; the burst window asks five (1 in 22 million). A link that counts every hour or two
    (0.6) needs eight."""
    assert _hits(BURST, needed - 1, usual) == []
    assert _hits(BURST, needed, usual) == [(0, 0, needed)]
    lax = Window(45, 3, BURST.floor, SHORT.confidence, "at the short window's confidence")
    assert _hits(lax, 3, 0.09)


def test_the_ratio_to_the_usual_rate_holds_in_both_windows() -> None:
    # 1.5 usual in 15 blocks: 4 x 1.5 + 0.75 = 6.75 blocks needed, whatever the confidence.
    assert _hits(SHORT, 6, 1.5) == []
    assert _hits(SHORT, 7, 1.5) == [(0, 0, 7)]


def test_only_a_block_with_an_event_now_can_warn() -> None:
    rate = np.zeros((1, 2))
    now = np.array([[True, False]])
    mask = np.array([[0b111, 0b111]], dtype=np.int64)
    assert window_hits(mask, rate, now, BURST, 4.0) == [(0, 0, 3)]
