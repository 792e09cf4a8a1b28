"""A small simulation with many events, written once per test session."""

from __future__ import annotations

import json

import pytest
from sim_helpers import SMALL, SimRun

from trainguard.simulate import simulate_to_dir


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> SimRun:
    out = tmp_path_factory.mktemp("sim") / "out"
    summary = simulate_to_dir(SMALL, out)
    labels = [json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    return SimRun(out, summary, labels, manifest)
