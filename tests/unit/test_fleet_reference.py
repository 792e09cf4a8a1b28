"""scripts/fleet_reference.py: the independent reference figures, on a tiny hand-made trace.

Every expected number below is worked out by hand in the comments (fleet of 4 nodes, window
[0, 10) days, so node-days = 40), not copied from a run of the script.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from script_module import load_script

ref = load_script("scripts/fleet_reference.py", "fleet_reference")

GPU = ("Hardware Failure", "GPU", "X")
NIC = ("Hardware Failure", "NIC", "Y")
OTHER = ("Other Failure", "Unknown", "Unknown")
SOFT = ("Software Failure", "Tool", "Z")

# (time in days, node, type, start?)
EVENTS = [
    (1.0, "A", GPU, True),
    (1.5, "A", NIC, True),
    (2.0, "A", GPU, False),    # A GPU repaired after 1 d = 24 h
    (2.5, "B", OTHER, True),
    (3.0, "A", NIC, False),    # A NIC 1.5 d = 36 h; A down [1, 3] (union)
    (3.5, "B", OTHER, False),  # B 1 d = 24 h; A and B both down in [2.5, 3]
    (5.0, "B", NIC, False),    # an end with no start: unmatched, ignored
    (6.0, "A", GPU, True),
    (6.25, "A", GPU, False),   # 0.25 d = 6 h
    (8.0, "C", SOFT, True),    # never ends: open, down to the window end
    (9.0, "D", OTHER, True),
    (9.5, "D", OTHER, False),  # 0.5 d = 12 h; C and D both down in [9, 9.5]
    (11.0, "A", GPU, True),    # outside [0, 10)
    (12.0, "A", GPU, False),
]


def _event(time: float, node: str, ftype: tuple[str, str, str], start: bool) -> dict[str, Any]:
    return {"node_id": node, "event_time": time,
            "event_type": "fault_start" if start else "fault_end",
            "fault_type": dict(zip(("Level", "Class", "Desc"), ftype, strict=True))}


@pytest.fixture()
def trace_json(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([_event(*e) for e in EVENTS], indent=4), encoding="utf-8")
    return path


def _run(*argv: str) -> dict[str, Any]:
    result: dict[str, Any] = ref.run(list(argv))
    return result


def test_quantile_is_linear_interpolation_type_7() -> None:
    assert ref.quantile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)  # h = 2.7
    assert ref.quantile([1.0, 3.0], 0.5) == pytest.approx(2.0)
    assert ref.quantile([5.0], 0.9) == 5.0
    assert ref.quantile([6.0, 24.0, 36.0], 0.9) == pytest.approx(33.6)  # h = 1.8


def test_hand_trace_figures(trace_json: Path) -> None:
    r = _run(str(trace_json), "--fleet-size", "4", "--window-end", "10")
    assert r["format"] == "json" and r["time_unit"] == "days"
    assert r["window"] == {"start": 0.0, "end": 10.0, "days": 10.0}
    assert r["node_days"] == pytest.approx(40.0)
    # counted: A GPU@1, A NIC@1.5, B@2.5, A GPU@6, C@8 (open), D@9; A GPU@11 is outside
    assert r["faults"] == 6
    assert (r["faults_closed"], r["faults_open"], r["faults_outside_window"]) == (5, 1, 1)
    assert r["unmatched_ends"] == 1
    assert r["nodes_with_faults"] == 4
    assert r["faults_per_node_day"] == pytest.approx(6 / 40)
    levels = r["by_level"]
    assert {k: v["faults"] for k, v in levels.items()} == {
        "Hardware Failure": 3, "Other Failure": 2, "Software Failure": 1}
    assert levels["Hardware Failure"]["per_node_day"] == pytest.approx(3 / 40)
    hw = levels["Hardware Failure"]["repair_hours"]  # [6, 24, 36]
    assert (hw["n"], hw["median"], hw["mean"], hw["max"]) == (3, 24.0, 22.0, 36.0)
    assert hw["p90"] == pytest.approx(33.6)
    other = levels["Other Failure"]["repair_hours"]  # [12, 24]
    assert other["median"] == pytest.approx(18.0)
    assert other["p90"] == pytest.approx(22.8)  # 12 + 0.9 * 12
    assert levels["Software Failure"]["repair_hours"] == {  # open only: no repair time
        "n": 0, "median": None, "p90": None, "mean": None, "max": None}
    every = r["repair_hours"]  # [6, 12, 24, 24, 36]
    assert every["median"] == pytest.approx(24.0)
    assert every["p90"] == pytest.approx(31.2)  # h = 3.6: 24 + 0.6 * 12
    assert every["mean"] == pytest.approx(20.4)
    assert r["mtbf_days"]["node"] == pytest.approx(40 / 6)
    assert r["mtbf_days"]["jobs"]["8"] == pytest.approx(40 / 6 / 8)
    assert set(r["mtbf_days"]["jobs"]) == {"8", "16", "32", "64", "128", "256"}
    # down: A [1,3] + [6,6.25] = 2.25, B 1, C [8,10] 2, D 0.5 -> 5.75 node-days in 10 days
    assert r["nodes_down"]["mean"] == pytest.approx(0.575)
    assert r["nodes_down"]["max"] == 2
    top = r["top_nodes"]  # A 3, then B, C, D with 1 each (ties by node id)
    assert top["share"] == pytest.approx(5 / 6)
    assert top["nodes"] == [["A", 3], ["B", 1], ["C", 1]]


def test_default_window_runs_to_the_last_event(trace_json: Path) -> None:
    r = _run(str(trace_json), "--fleet-size", "4")
    assert r["window"]["end"] == 12.0 and r["node_days"] == pytest.approx(48.0)
    assert r["faults"] == 7 and r["faults_outside_window"] == 0
    # C now open to 12: 4; A adds [11, 12]: 3.25; B 1; D 0.5 -> 8.75 in 12 days
    assert r["nodes_down"]["mean"] == pytest.approx(8.75 / 12)


def test_time_unit_scales_rates_and_repairs(trace_json: Path) -> None:
    """The same numbers read as hours: window 10 h = 10/24 day, repairs 24x shorter."""
    r = _run(str(trace_json), "--fleet-size", "4", "--window-end", "10", "--time-unit", "hours")
    assert r["node_days"] == pytest.approx(40 / 24)
    assert r["repair_hours"]["median"] == pytest.approx(1.0)
    assert r["nodes_down"]["mean"] == pytest.approx(0.575)  # a ratio of times: unit-free


def test_csv_in_unix_seconds_gives_the_same_figures(tmp_path: Path, trace_json: Path) -> None:
    t0 = 1_700_000_000
    rows = [("A", 1.0, 2.0, GPU), ("A", 1.5, 3.0, NIC), ("B", 2.5, 3.5, OTHER),
            ("A", 6.0, 6.25, GPU), ("C", 8.0, None, SOFT), ("D", 9.0, 9.5, OTHER),
            ("A", 11.0, 12.0, GPU)]
    lines = ["node,start,end,kind"] + [
        f"{n},{t0 + s * 86400:.0f},{'' if e is None else f'{t0 + e * 86400:.0f}'},"
        f"{' / '.join(k)}" for n, s, e, k in rows]
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = _run(str(path), "--fleet-size", "4", "--window-start", str(t0),
             "--window-end", str(t0 + 10 * 86400))
    j = _run(str(trace_json), "--fleet-size", "4", "--window-end", "10")
    assert r["format"] == "csv" and r["time_unit"] == "seconds"
    for key in ("node_days", "faults", "faults_open", "faults_per_node_day", "nodes_down"):
        assert r[key] == pytest.approx(j[key]), key
    assert r["repair_hours"] == pytest.approx(j["repair_hours"])
    assert r["by_level"]["Other Failure"]["repair_hours"] == pytest.approx(
        j["by_level"]["Other Failure"]["repair_hours"])
    assert r["top_nodes"]["share"] == pytest.approx(j["top_nodes"]["share"])


def test_pairing_is_first_in_first_out(tmp_path: Path) -> None:
    """Two open faults of one node and type: the first end closes the first start."""
    path = tmp_path / "fifo.json"
    path.write_text(json.dumps([_event(0.0, "E", GPU, True), _event(1.0, "E", GPU, True),
                                _event(2.0, "E", GPU, False), _event(5.0, "E", GPU, False)]))
    r = _run(str(path), "--fleet-size", "1", "--window-end", "10")
    rep = r["repair_hours"]
    # FIFO: (0, 2), (1, 5) -> [48, 96] h; p90 = 48 + 0.9 * 48 (LIFO would give 110.4)
    assert rep["p90"] == pytest.approx(91.2)
    assert rep["max"] == pytest.approx(96.0)
    assert r["nodes_down"] == {"mean": pytest.approx(0.5), "max": 1}  # union [0, 5]


@pytest.mark.parametrize(("content", "args", "needle"), [
    (None, [], "cannot read"),
    ("[]", [], "non-empty JSON array"),
    ('[{"node_id": "a", "event_time": 1, "event_type": "begin", "fault_type": "x"}]', [],
     "unknown event_type"),
    ('[{"node_id": "a", "event_time": 1, "event_type": "fault_start", "fault_type": "x"}]',
     ["--window-end", "0"], "empty window"),
    ("node,start,end,kind\na,10,20,x\nb,30,20,x\n", [], "line 3: end 20 is before start 30"),
    ("node,when,kind\n", [], "line 1: expected the header"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         content: str | None, args: list[str],
                                         needle: str) -> None:
    path = tmp_path / "in.txt"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert ref.main([str(path), "--fleet-size", "10", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_fleet_smaller_than_the_nodes_in_the_file_is_refused(
        trace_json: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ref.main([str(trace_json), "--fleet-size", "3"]) == 2
    assert "below the 4 nodes" in capsys.readouterr().err


REAL = os.environ.get("TRAINGUARD_FLEET_TRACE")


@pytest.mark.skipif(not REAL, reason="set TRAINGUARD_FLEET_TRACE to a local "
                    "fault_trace.json (InfiniteHBD-Trace has no licence, so it is not stored)")
def test_real_infinitehbd_trace_matches_its_published_statistics() -> None:
    assert REAL is not None
    path = Path(REAL)
    r = _run(str(path), "--fleet-size", "400")
    assert r["faults"] == 584 and r["nodes_with_faults"] == 231
    assert r["unmatched_ends"] == 0
    stats_path = path.with_name("fault_statistics.json")
    if stats_path.is_file():
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
        assert {k: v["faults"] for k, v in r["by_level"].items()} == {
            level: body["LevelTotal"] for level, body in stats.items()}
