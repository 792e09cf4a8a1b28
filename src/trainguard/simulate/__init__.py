"""A synthetic training cluster: dcgm/node-exporter telemetry, kernel logs and ground truth.

    >>> from trainguard.simulate import SimConfig, generate
    >>> chunk = next(generate(SimConfig(nodes=2, gpus_per_node=2, days=0.05)))
    >>> chunk.step_s
    30
"""

from __future__ import annotations

from trainguard.simulate.config import DEFAULT_START_S, WINDOW_S, SimConfig, parse_start
from trainguard.simulate.faults import PRECURSOR_SHAPES
from trainguard.simulate.metrics import ALL_METRICS, MetricBlock, MetricDef, SimChunk
from trainguard.simulate.run import ProgressFn, SimSummary, generate, simulate_to_dir
from trainguard.simulate.scenario import Scenario, build_scenario
from trainguard.simulate.serve import ExporterServer, LiveExporter, SimClock

__all__ = [
    "ALL_METRICS",
    "DEFAULT_START_S",
    "PRECURSOR_SHAPES",
    "WINDOW_S",
    "ExporterServer",
    "LiveExporter",
    "MetricBlock",
    "MetricDef",
    "ProgressFn",
    "Scenario",
    "SimChunk",
    "SimClock",
    "SimConfig",
    "SimSummary",
    "build_scenario",
    "generate",
    "parse_start",
    "simulate_to_dir",
]
