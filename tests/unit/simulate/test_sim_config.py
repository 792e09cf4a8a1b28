"""SimConfig validation: every bad value names its key; --start parsing."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainguard.errors import ConfigError
from trainguard.simulate import WINDOW_S, SimConfig, parse_start


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"nodes": 0}, "simulate.nodes"),
    ({"gpus_per_node": 17}, "simulate.gpus_per_node"),
    ({"days": 0}, "simulate.days"),
    ({"days": -1}, "simulate.days"),
    ({"interval_s": 7}, "simulate.interval_s"),
    ({"interval_s": 0}, "simulate.interval_s"),
    ({"seed": -1}, "simulate.seed"),
    ({"failures_per_day": -0.5}, "simulate.failures_per_day"),
    ({"missing_sample_prob": 1.5}, "simulate.missing_sample_prob"),
    ({"no_precursor_fraction": -0.1}, "simulate.no_precursor_fraction"),
    ({"target_utilization": 0}, "simulate.target_utilization"),
    ({"model_name": 'bad"name'}, "simulate.model_name"),
    ({"days": 0.0001, "interval_s": 60}, "simulate.days"),
])
def test_bad_values_name_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        SimConfig(**kwargs)


def test_defaults_and_windows() -> None:
    cfg = SimConfig()
    assert (cfg.nodes, cfg.gpus_per_node, cfg.days, cfg.interval_s) == (63, 8, 7.0, 30)
    assert cfg.start_s % WINDOW_S == 0
    assert cfg.n_windows == 7 * 12
    assert cfg.node_names[6] == "node07"
    unaligned = SimConfig(start_s=cfg.start_s + 3600, days=1)
    assert unaligned.first_window_s == cfg.start_s
    assert unaligned.n_windows == 13


@pytest.mark.parametrize(("text", "expected"), [
    ("1731888000", 1731888000),
    ("2024-11-18T00:00:00Z", 1731888000),
    ("2024-11-18T00:00:00", 1731888000),
    ("2024-11-18T01:00:00+01:00", 1731888000),
])
def test_parse_start(text: str, expected: int) -> None:
    assert parse_start(text) == expected


def test_parse_start_rejects_garbage() -> None:
    with pytest.raises(ConfigError, match=r"simulate\.start"):
        parse_start("next tuesday")
