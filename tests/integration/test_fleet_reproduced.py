"""The fleet figures, reproduced from the raw trace by an independent script (issue #29).

`trainguard history import` + `trainguard fleet --json` (real subprocesses, a real SQLite store)
against `scripts/fleet_reference.py`, which shares no code with trainguard, on seeded synthetic
traces (independent nodes, lemons, bursts) and the synthetic example the docs use; and on the
real InfiniteHBD trace when ``TRAINGUARD_FLEET_TRACE`` names a local copy of its
``fault_trace.json`` (it has no licence, so it is not in the repository). The real trace is
also checked against the counts its authors published (584 faults on 231 of 400 servers;
Hardware 298 / Software 24 / Other 262).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "fleet" / "synthetic-fault-trace.json"
MAPPING = REPO / "examples" / "fleet" / "infinitehbd-map.toml"
REAL = os.environ.get("TRAINGUARD_FLEET_TRACE")
SIZES = (8, 16, 32, 64, 128, 256)


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _trainguard(*argv: str) -> str:
    return _run(sys.executable, "-m", "trainguard.cli.main", *argv)


def _ours(trace: Path, tmp: Path, fleet_size: int, days: float, *extra: str) -> dict[str, Any]:
    db = tmp / "fleet.db"
    _trainguard("history", "import", str(trace), "--fleet-size", str(fleet_size),
                "--time-unit", "days", "--window-end", repr(days), "--name", "t",
                "--db", str(db), *extra)
    doc: dict[str, Any] = json.loads(_trainguard(
        "fleet", "--history", "t", "--db", str(db), "--json", "--replays", "2",
        "--job-sizes", ",".join(map(str, SIZES))))
    return doc


def _reference(trace: Path, fleet_size: int, days: float) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_run(
        sys.executable, str(REPO / "scripts" / "fleet_reference.py"), str(trace),
        "--fleet-size", str(fleet_size), "--time-unit", "days", "--window-end", repr(days),
        "--job-sizes", ",".join(map(str, SIZES))))
    return doc


def _agree(ours: dict[str, Any], ref: dict[str, Any]) -> None:
    fleet = ours["fleet"]
    hours = 3600.0
    assert fleet["counts"]["faults"] == ref["faults"]
    assert fleet["counts"]["open"] == ref["faults_open"]
    assert fleet["counts"]["nodes_with_faults"] == ref["nodes_with_faults"]
    assert fleet["window"]["node_days"] == pytest.approx(ref["node_days"])
    assert fleet["rates"]["overall"]["per_node_day"] == pytest.approx(ref["faults_per_node_day"])
    # Without a mapping a fault's category is its type's top level: the reference's Level.
    ours_levels = {r["category"]: r for r in fleet["rates"]["by_category"]}
    assert set(ours_levels) == set(ref["by_level"])
    for level, theirs in ref["by_level"].items():
        assert ours_levels[level]["faults"] == theirs["faults"]
        assert ours_levels[level]["per_node_day"] == pytest.approx(theirs["per_node_day"])
    repairs = {r["category"]: r for r in fleet["repairs"]["by_category"]}
    for level, theirs in ref["by_level"].items():
        got, want = repairs[level], theirs["repair_hours"]
        assert got["count"] == want["n"]
        if want["n"]:
            assert got["median_s"] / hours == pytest.approx(want["median"], rel=1e-9)
            assert got["p90_s"] / hours == pytest.approx(want["p90"], rel=1e-9)
            assert got["mean_s"] / hours == pytest.approx(want["mean"], rel=1e-9)
    overall = fleet["repairs"]["overall"]
    assert overall["median_s"] / hours == pytest.approx(ref["repair_hours"]["median"])
    assert overall["p90_s"] / hours == pytest.approx(ref["repair_hours"]["p90"])
    assert overall["max_s"] / hours == pytest.approx(ref["repair_hours"]["max"])
    assert fleet["mtbf"]["node"]["mtbf_days"] == pytest.approx(ref["mtbf_days"]["node"])
    jobs = {m["job_nodes"]: m["mtbf_days"] for m in fleet["mtbf"]["jobs"]}
    for size, days in ref["mtbf_days"]["jobs"].items():
        if int(size) in jobs:
            assert jobs[int(size)] == pytest.approx(days)
    assert fleet["nodes_down"]["mean"] == pytest.approx(ref["nodes_down"]["mean"], rel=1e-9)
    assert fleet["nodes_down"]["max"] == ref["nodes_down"]["max"]
    assert fleet["lemons"]["top_k"]["share"] == pytest.approx(ref["top_nodes"]["share"])


@pytest.mark.parametrize(("label", "extra"), [
    ("independent", ()), ("lemons", ("--lemons", "6")), ("bursts", ("--bursts", "6")),
])
def test_synthetic_traces_reproduce(tmp_path: Path, label: str, extra: tuple[str, ...]) -> None:
    trace = tmp_path / f"{label}.json"
    _run(sys.executable, str(REPO / "benchmarks" / "fleet_synth.py"), "--nodes", "200",
         "--days", "300", "--seed", str(len(label)), "--out", str(trace), *extra)
    ours = _ours(trace, tmp_path, 200, 300.0)
    _agree(ours, _reference(trace, 200, 300.0))
    assert {s["nodes"] for s in ours["planning"]["sizes"]} <= set(SIZES)


def test_the_docs_example_reproduces(tmp_path: Path) -> None:
    _agree(_ours(EXAMPLE, tmp_path, 300, 365.0), _reference(EXAMPLE, 300, 365.0))


@pytest.mark.skipif(not REAL, reason="set TRAINGUARD_FLEET_TRACE to a local copy of "
                    "InfiniteHBD-Trace's fault_trace.json (no licence: not in the repository)")
def test_the_real_trace_reproduces_and_matches_its_published_counts(tmp_path: Path) -> None:
    trace = Path(str(REAL))
    ours = _ours(trace, tmp_path, 400, 349.0)
    _agree(ours, _reference(trace, 400, 349.0))
    fleet = ours["fleet"]
    assert fleet["counts"]["faults"] == 584 and fleet["counts"]["nodes_with_faults"] == 231
    levels = {r["category"]: r["faults"] for r in fleet["rates"]["by_category"]}
    assert levels == {"Hardware Failure": 298, "Software Failure": 24, "Other Failure": 262}
    # The trace is bursty: the planning answers come from the replay, and say why.
    sizes = ours["planning"]["sizes"]
    assert ours["planning"]["burstiness"]["bursty"]
    assert all(s["answer_from"] == "replay" and "bursty" in s["why"] for s in sizes)
    # Mapped onto the taxonomy, every type of the trace lands somewhere named.
    db = tmp_path / "mapped.db"
    text = _trainguard("history", "import", str(trace), "--fleet-size", "400", "--time-unit",
                       "days", "--window-end", "349", "--map", str(MAPPING), "--db", str(db),
                       "--json")
    assert json.loads(text)["counts"]["mapped"] == 567
