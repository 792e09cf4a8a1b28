"""The fleet figures as JSON (keys, units, round trip) and as terminal tables (the figures are
there, data is never markup or escapes)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from trainguard.cli.fleetview import KINDS_SHOWN, print_summary, summary_json, summary_rows
from trainguard.fleet import FaultEvent, FleetWindow
from trainguard.fleet.summary import FleetSummary, fleet_summary

DAY = 86400.0
H = 3600.0


def small_fleet() -> FleetSummary:
    """Four nodes over ten days: a 3 faults (one open), b 1, c down before the window."""
    events = [
        FaultEvent("a", 1 * DAY, 1 * DAY + 2 * H, "GPU / DBE", "gpu"),
        FaultEvent("a", 3 * DAY, 3 * DAY + 10 * H, "GPU / fell off the bus", "gpu"),
        FaultEvent("b", 3 * DAY + 5 * H, 3 * DAY + 6 * H, "NIC / link flap", "network"),
        FaultEvent("a", 9 * DAY, None, "GPU / DBE", "gpu"),
        FaultEvent("c", -1 * DAY, 0.5 * DAY, "PSU", "power"),
    ]
    return fleet_summary(events, FleetWindow(0.0, 10 * DAY, fleet_size=4), job_sizes=(1, 2, 8))


def lemon_fleet() -> FleetSummary:
    """63 nodes, 30 days: three lemons with 31 of 51 faults, 12 kinds."""
    events = []
    for node, n in (("bad1", 12), ("bad2", 10), ("bad3", 9)):
        events += [FaultEvent(node, i * DAY, i * DAY + H, f"kind {i % 12:02d}", "gpu")
                   for i in range(n)]
    events += [FaultEvent(f"n{i:02d}", i * DAY + 60.0, i * DAY + 2 * H, "kind 00", "network")
               for i in range(20)]
    return fleet_summary(events, FleetWindow(0.0, 30 * DAY, fleet_size=63))


def render(s: FleetSummary, width: int = 160) -> str:
    buf = io.StringIO()
    print_summary(Console(file=buf, width=width, color_system=None, highlight=False), s)
    return buf.getvalue()


def test_json_keys_and_round_trip() -> None:
    doc = summary_json(small_fleet())
    assert list(doc) == ["window", "confidence", "counts", "rates", "mtbf", "repairs",
                         "nodes_down", "lemons", "report_comparison"]
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert doc["window"] == {"start": 0.0, "end": 10 * DAY, "days": 10.0, "fleet_size": 4,
                             "node_days": 40.0}
    assert doc["counts"] == {"events": 5, "faults": 4, "open": 1, "before_window": 1,
                             "after_window": 0, "nodes_with_faults": 2}


def test_json_figures_and_units() -> None:
    doc = summary_json(small_fleet())
    overall = doc["rates"]["overall"]
    assert (overall["faults"], overall["per_node_day"], overall["mtbf_node_days"]) == \
        (4, 0.1, 10.0)
    assert [c["category"] for c in doc["rates"]["by_category"]] == ["gpu", "network"]
    first = doc["rates"]["by_kind"][0]
    assert (first["kind"], first["faults"], first["per_node_day"]) == ("GPU / DBE", 2, 0.05)
    jobs = doc["mtbf"]["jobs"]
    assert [j["job_nodes"] for j in jobs] == [1, 2, 4]
    assert jobs[1]["mtbf_days"] == pytest.approx(5.0)
    assert jobs[1]["mtbf_s"] == pytest.approx(5 * DAY)
    assert doc["mtbf"]["job_sizes_dropped"] == [8]
    rep = doc["repairs"]["overall"]
    assert (rep["count"], rep["open"], rep["median_s"], rep["median_days"]) == \
        (3, 1, 2 * H, pytest.approx(2 / 24))
    for key in ("median", "p90", "mean", "max", "total"):
        assert rep[f"{key}_days"] == pytest.approx(rep[f"{key}_s"] / DAY)
    assert doc["repairs"]["longest"][0] == {
        "node": "a", "kind": "GPU / fell off the bus", "category": "gpu", "start": 3 * DAY,
        "start_day": 3.0, "duration_s": 10 * H, "duration_days": pytest.approx(10 / 24)}
    down = doc["nodes_down"]
    assert down["fraction_at"] == pytest.approx({"0": 0.8, "1": 47 / 240, "2": 1 / 240})
    assert (down["p99"], down["max"], down["series"]["bucket_s"]) == (1, 2, H)
    assert len(down["series"]["start"]) == len(down["series"]["max"]) == 240
    lem = doc["lemons"]
    assert lem["dispersion"]["index"] == 2.0 and lem["dispersion"]["df"] == 3
    assert [b["nodes"] for b in lem["count_bins"]] == [2, 1, 0, 1]
    assert lem["top_k"]["share"] == 1.0
    comp = doc["report_comparison"]
    assert (comp["looks_like_report"], comp["top3"]["share"], comp["scaled"]["nodes"]) == \
        (True, 1.0, 1)
    assert comp["poisson_method"].startswith("analytic")


def test_json_of_a_fleet_without_faults_has_no_infinity() -> None:
    s = fleet_summary([], FleetWindow(0.0, DAY, fleet_size=3))
    doc = summary_json(s)
    json.dumps(doc, allow_nan=False)
    assert doc["mtbf"]["node"]["mtbf_s"] is None and doc["mtbf"]["node"]["high_days"] is None
    assert doc["mtbf"]["node"]["low_s"] == pytest.approx(DAY / (3.689 / 3), rel=1e-3)
    assert doc["rates"]["overall"]["mtbf_node_days"] is None
    assert doc["lemons"]["nodes"] == [] and doc["repairs"]["longest"] == []


def test_terminal_shows_the_figures() -> None:
    text = render(small_fleet())
    for shown in ("10.0 d x 4 nodes = 40.0 node-days", "0.1 (95% CI 0.0272–0.256)",
                  "MTBF per node", "10.0 d", "gpu", "network", "0.075", "GPU / fell off the bus",
                  "10.00 h", "2.00 h", "8.40 h", "80.00%", "19.58%", "index 2.00",
                  "top 3 hold 100% of faults", "longest repairs", "nodes down at once",
                  "MTBF of an N-node job", "job sizes above the fleet size left out: 8"):
        assert shown in text, shown
    rows = dict(summary_rows(small_fleet()))
    assert rows["report: 3 of 63 nodes > 50%"].startswith("yes: top 3 hold 100%")
    assert rows["lemons"].startswith("none")


def test_terminal_names_lemons_and_caps_the_kinds() -> None:
    s = lemon_fleet()
    assert s.lemons.lemons == ["bad1", "bad2", "bad3"]
    text = render(s)
    assert "bad1, bad2, bad3 (Poisson tail" in text
    assert f"by kind (top {KINDS_SHOWN} of 12)" in text
    assert "kind 11" not in text  # the two kinds with fewest faults are in JSON only
    assert len(summary_json(s)["rates"]["by_kind"]) == 12
    rows = dict(summary_rows(s))
    assert rows["report: 3 of 63 nodes > 50%"].startswith("yes: top 3 hold 61%")
    assert "over-dispersion" in rows and "p = " in rows["over-dispersion"]


def test_terminal_data_is_neither_markup_nor_escapes() -> None:
    events = [FaultEvent("n[bold]1\x1b[31m", DAY, DAY + H, "GPU [red]x[/red]", "gpu")]
    s = fleet_summary(events, FleetWindow(0.0, 2 * DAY, fleet_size=2))
    text = render(s)
    assert "\x1b" not in text
    assert "GPU [red]x[/red]" in text and "n[bold]1" in text


@pytest.mark.parametrize("width", [60, 100])
def test_terminal_fits_narrow_consoles(width: int) -> None:
    text = render(lemon_fleet(), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "bad1" in text


def test_nodes_down_rows_are_binned_when_there_are_many_counts() -> None:
    import doctest

    from trainguard.cli import fleetview

    result = doctest.testmod(fleetview)
    assert result.attempted >= 2 and result.failed == 0
    seconds = {c: 1.0 for c in range(36)}
    rows = fleetview.down_bins(seconds)
    assert rows[0] == ("0", 1.0) and len(rows) <= 13
    assert sum(v for _, v in rows) == 36.0  # every second is in exactly one row
