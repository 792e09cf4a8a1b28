"""Fixtures: synthetic outage tables (helpers in planning_traces.py)."""

from __future__ import annotations

import pytest
from planning_traces import YEAR_S, TraceMaker, bursty_outages, fleet_of, poisson_outages

from trainguard.planning import OutageTable, outage_table


@pytest.fixture
def poisson_trace() -> TraceMaker:
    def make(nodes: int = 300, mtbf_days: float = 60.0, repair_hours: float = 12.0,
             seed: int = 1, span_s: float = YEAR_S) -> OutageTable:
        outs = poisson_outages(nodes, mtbf_days * 86400.0, repair_hours * 3600.0, span_s, seed)
        return outage_table(outs, fleet_of(nodes, span_s))
    return make


@pytest.fixture
def bursty_trace() -> TraceMaker:
    def make(nodes: int = 300, seed: int = 7) -> OutageTable:
        outs = bursty_outages(nodes, 0.5, 24, 12 * 3600.0, YEAR_S, seed)
        return outage_table(outs, fleet_of(nodes))
    return make
