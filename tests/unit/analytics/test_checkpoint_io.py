"""Checkpoint throughput and link utilization."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.analytics import checkpoint_io
from trainguard.errors import ConfigError
from trainguard.store import Store


def test_checkpoint_io_matches_plain(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    summary = checkpoint_io(store.checkpoints(), bandwidth_bps=200e9)
    rates = [c.size_bytes / c.save_s for c in store.checkpoints()
             if c.ok and c.size_bytes and c.save_s]
    assert summary.measured == len(rates) == 5
    assert summary.median_bytes_per_s == pytest.approx(float(np.median(rates)))
    assert summary.median_bytes_per_s == pytest.approx(1e9)
    assert summary.p90_bytes_per_s == pytest.approx(1e9 + 0.6 * 1.4e9)
    assert summary.median_utilization == pytest.approx(8e9 / 200e9)
    assert summary.median_stall_s == pytest.approx(6.0)  # 10 (sync), 4, 5, 6, 6


def test_checkpoint_io_edges() -> None:
    empty = checkpoint_io([])
    assert (empty.measured, empty.median_bytes_per_s, empty.p90_utilization) == (0, None, None)
    with pytest.raises(ConfigError, match="bandwidth_bps"):
        checkpoint_io([], bandwidth_bps=0.0)
