"""The usual rate the recurring-count and stall rules judge a burst against
(`precursor_state.learn_before`)."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.detect.precursor_state import grow_recur, learn_before

W = 15
ALPHA = 1.0 - 0.5 ** (1.0 / 360.0)


def _feed(events: list[int], clear_at: int | None = None) -> list[float]:
    """One series, one block per entry of `events`; the rule clears its window at `clear_at`
    (it fired there). Returns the usual rate after each block."""
    st = grow_recur(None, (1, 1))
    ok = np.ones((1, 1), dtype=bool)
    out = []
    for b, e in enumerate(events):
        learn_before(st, np.full((1, 1), bool(e)), ok, ALPHA, W)
        st.mask = ((st.mask << 1) | e) & ((1 << W) - 1)
        if b == clear_at:
            st.mask[:] = 0
        st.blocks = st.blocks + ok
        out.append(float(st.rate[0, 0]))
    return out


def test_a_burst_is_not_in_the_rate_it_is_judged_against_until_it_leaves_the_window() -> None:
    events = [0] * 40 + [1, 1, 1, 1] + [0] * 30
    rate = _feed(events)
    assert rate[43] == rate[39] == 0.0  # the burst's own blocks: still in the window
    assert rate[43 + W] > 0.0  # once they have left it, they are history
    # A plain mean of the blocks that left the window (not an exponential mean from zero).
    assert rate[-1] == pytest.approx(4 / (len(events) - W))


def test_a_burst_a_rule_fired_on_still_counts_once_it_is_history() -> None:
    events = [0] * 40 + [1, 1, 1, 1] + [0] * 30
    assert _feed(events, clear_at=43) == _feed(events)
