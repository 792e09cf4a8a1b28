"""benchmarks/fleet_synth.py: seeded, InfiniteHBD-shaped, no same-type overlaps, lemons, bursts."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from script_module import load_script

synth = load_script("benchmarks/fleet_synth.py", "fleet_synth")
ref = load_script("scripts/fleet_reference.py", "fleet_reference")

UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _spans(events: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """FIFO-pair the events per (node, type); an open fault ends at +inf."""
    open_: dict[tuple[str, str], list[float]] = defaultdict(list)
    spans: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        key = (e["node_id"], " / ".join(e["fault_type"].values()))
        if e["event_type"] == "fault_start":
            open_[key].append(e["event_time"])
        else:
            assert open_[key], f"end without start: {e}"
            spans[key].append((open_[key].pop(0), e["event_time"]))
    for key, starts in open_.items():
        spans[key].extend((s, math.inf) for s in starts)
    return spans


def test_format_and_determinism() -> None:
    a = synth.generate(40, 60, rate=0.02, seed=7)
    b = synth.generate(40, 60, rate=0.02, seed=7)
    c = synth.generate(40, 60, rate=0.02, seed=8)
    assert a.events == b.events and a.events != c.events
    assert a.events, "a 2400 node-day fleet at 0.02/node-day has faults"
    times = [e["event_time"] for e in a.events]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 60
    for e in a.events:
        assert list(e) == ["node_id", "event_time", "event_type", "fault_type"]
        assert UUID4.fullmatch(e["node_id"]) and e["node_id"] in a.nodes
        assert e["event_type"] in ("fault_start", "fault_end")
        assert list(e["fault_type"]) == ["Level", "Class", "Desc"]
        assert tuple(e["fault_type"].values()) in {k for k, _ in synth.CATALOGUE}
        assert e["event_time"] == round(e["event_time"], 4)
    starts = sum(e["event_type"] == "fault_start" for e in a.events)
    assert starts == a.faults and starts - a.open_faults == len(a.events) - starts


def test_no_overlapping_faults_of_one_node_and_type_even_with_bursts() -> None:
    trace = synth.generate(30, 200, rate=0.05, repair_median_h=48, repair_sigma=2.0,
                           lemons=3, lemon_factor=8, bursts=6, burst_fraction=0.5, seed=3)
    spans = _spans(trace.events)
    assert sum(len(v) for v in spans.values()) == trace.faults
    for key, intervals in spans.items():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start > end, f"{key}: a fault starts at {start} before {end}"


def test_rate_lemons_and_bursts_show_in_the_counts() -> None:
    nodes, days, rate = 200, 365, 0.004
    trace = synth.generate(nodes, days, rate=rate, lemons=4, lemon_factor=12, seed=11)
    per_node = Counter(e["node_id"] for e in trace.events if e["event_type"] == "fault_start")
    lemons = set(trace.lemon_nodes)
    base = sum(c for n, c in per_node.items() if n not in lemons)
    expected = (nodes - 4) * days * rate  # 286; realised slightly lower (renewal)
    assert abs(base - expected) < 5 * math.sqrt(expected)
    lemon_mean = sum(per_node[n] for n in lemons) / 4
    assert lemon_mean > 5 * base / (nodes - 4)
    # bursts: many nodes start a fault within the jitter window after each burst instant
    bursty = synth.generate(nodes, days, rate=rate, bursts=2, burst_fraction=0.2, seed=11)
    for t0 in bursty.burst_times:
        hit = {e["node_id"] for e in bursty.events if e["event_type"] == "fault_start"
               and t0 <= e["event_time"] <= t0 + synth.BURST_JITTER_DAYS + 1e-4}
        assert len(hit) >= 0.2 * nodes - bursty.dropped - 2


def test_cli_writes_a_trace_the_reference_script_reads(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fleet.json"
    assert synth.main(["--nodes", "50", "--days", "90", "--out", str(out), "--lemons", "2",
                       "--bursts", "1", "--seed", "5", "--rate", "0.02"]) == 0
    assert "faults" in capsys.readouterr().out
    events = json.loads(out.read_text(encoding="utf-8"))
    starts = sum(e["event_type"] == "fault_start" for e in events)
    figures = ref.run([str(out), "--fleet-size", "50", "--window-end", "90"])
    assert figures["faults"] == starts and figures["unmatched_ends"] == 0
    assert figures["node_days"] == pytest.approx(50 * 90)


def test_cli_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert synth.main(["--nodes", "5", "--days", "10", "--out", str(tmp_path / "x.json"),
                       "--lemons", "6"]) == 2
    assert "lemons" in capsys.readouterr().err
    assert synth.main(["--nodes", "5", "--days", "10",
                       "--out", str(tmp_path / "missing" / "x.json")]) == 2
