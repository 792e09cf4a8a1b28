"""The fleet section of the HTML report: each chart's data read back from the figure JSON, the
section's embedded JSON, and the shared page pieces (trainguard.report.page)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from trainguard.cli.fleetview import summary_html, summary_json
from trainguard.fleet import FaultEvent, FleetWindow
from trainguard.fleet.summary import FleetSummary, fleet_summary
from trainguard.report.page import html_page, json_island

go = pytest.importorskip("plotly.graph_objects", reason="the HTML report needs plotly")
charts = pytest.importorskip("trainguard.report.fleetcharts")

DAY = 86400.0
H = 3600.0
NAMES = ["fleet-rates", "fleet-repairs", "fleet-down", "fleet-down-time", "fleet-nodes"]


@pytest.fixture
def s() -> FleetSummary:
    events = [
        FaultEvent("a", 1 * DAY, 1 * DAY + 2 * H, "GPU / DBE", "gpu"),
        FaultEvent("a", 3 * DAY, 3 * DAY + 10 * H, "GPU / fell off the bus", "gpu"),
        FaultEvent("<b>&amp;", 3 * DAY + 5 * H, 3 * DAY + 6 * H, "NIC </script>", "network"),
        FaultEvent("a", 9 * DAY, None, "GPU / DBE", "gpu"),
    ]
    return fleet_summary(events, FleetWindow(0.0, 10 * DAY, fleet_size=4))


def fig(build: Any, s: FleetSummary) -> dict[str, Any]:
    doc: dict[str, Any] = build(go, s).to_plotly_json()
    return doc


def test_rates_chart_has_the_rates_and_their_intervals(s: FleetSummary) -> None:
    (bar,) = fig(charts.rates_chart, s)["data"]
    cats = s.rates.by_category
    assert list(bar["x"]) == ["gpu", "network"]
    assert list(bar["y"]) == [0.075, 0.025]
    assert list(bar["error_y"]["array"]) == pytest.approx([r.high - r.rate for r in cats.values()])
    assert list(bar["error_y"]["arrayminus"]) == pytest.approx(
        [r.rate - r.low for r in cats.values()])


def test_repairs_chart_has_every_repair_in_hours(s: FleetSummary) -> None:
    doc = fig(charts.repairs_chart, s)
    assert {tr["name"]: list(tr["y"]) for tr in doc["data"]} == {"gpu": [2.0, 10.0],
                                                                "network": [1.0]}
    assert doc["layout"]["yaxis"]["title"]["text"] == "hours"
    assert doc["layout"]["yaxis"]["type"] == "linear"  # 1 h to 10 h: one decade


def test_down_charts(s: FleetSummary) -> None:
    (bar,) = fig(charts.down_chart, s)["data"]
    # one down: a 2 h + (10 h - 1 h) + 24 h (open) = 35 h; two: b 1 h inside a's 10 h
    assert list(bar["x"]) == [0, 1, 2]
    assert list(bar["y"]) == pytest.approx([204 / 240 * 100, 35 / 240 * 100, 1 / 240 * 100])
    peak, mean = fig(charts.down_time_chart, s)["data"]
    assert len(peak["x"]) == 240 and peak["x"][0] == 0.0 and peak["x"][1] == pytest.approx(1 / 24)
    assert max(peak["y"]) == 2 and peak["y"][3 * 24 + 5] == 2 and peak["y"][0] == 0
    assert "max per hour" in peak["name"] and len(mean["y"]) == 240


def test_nodes_chart_against_poisson(s: FleetSummary) -> None:
    bars, expected = fig(charts.nodes_chart, s)["data"]
    assert list(bars["x"]) == [0, 1, 2, 3] and list(bars["y"]) == [2, 1, 0, 1]
    assert list(expected["y"]) == pytest.approx([b.expected for b in s.count_bins])


def test_charts_draw_without_faults() -> None:
    empty = fleet_summary([], FleetWindow(0.0, DAY, fleet_size=2))
    for _, build in charts.FLEET_FIGURES:
        doc = fig(build, empty)
        assert doc["layout"]["title"]["text"]
    assert fig(charts.rates_chart, empty)["layout"]["annotations"][0]["text"] == \
        "no faults in the window"


def test_section_holds_every_chart_and_its_json(s: FleetSummary) -> None:
    text = summary_html(s)
    assert re.findall(r"data-figure='([a-z-]+)'", text) == NAMES
    assert text.startswith("<section class='fleet'>") and text.endswith("</section>")
    island = re.search(r"<script type='application/json' id='tg-fleet-data'>(.*?)</script>",
                       text, flags=re.S)
    assert island is not None
    assert json.loads(island.group(1)) == json.loads(json.dumps(summary_json(s)))
    # the nodes and the longest repairs as tables, their data escaped
    assert "<caption>Nodes with the most faults</caption>" in text
    assert "<caption>Longest repairs</caption>" in text
    assert "<td class='t'>&lt;b&gt;&amp;amp;</td>" in text
    assert "<td class='t'>NIC &lt;/script&gt;</td><td>3.21</td>" in text
    from plotly.offline import get_plotlyjs
    assert get_plotlyjs()[:200] not in text  # plotly.js comes once, with the page


def test_json_island_text_is_the_json_itself() -> None:
    data = {"node": "a<b>&c</script><script>x()", "n": [1, 2.5, None]}
    text = json_island("d", data)
    body = text.removeprefix("<script type='application/json' id='d'>").removesuffix("</script>")
    assert "<" not in body and ">" not in body and "&" not in body
    assert json.loads(body) == data


def test_page_inlines_plotly_once(s: FleetSummary) -> None:
    from plotly.offline import get_plotlyjs
    page = html_page("fleet <x>", [summary_html(s), "<p>more</p>"])
    assert page.count(get_plotlyjs()[:200]) == 1
    assert "<title>fleet &lt;x&gt;</title>" in page and "<pre id='tg-errors'></pre>" in page
    assert page.endswith("<p>more</p>\n</body></html>")


def test_units_and_bucket_names() -> None:
    assert charts.time_unit(30.0) == ("seconds", 1.0)
    assert charts.time_unit(1800.0) == ("minutes", 60.0)
    assert charts.time_unit(3 * H) == ("hours", H)
    assert charts.time_unit(3 * DAY) == ("days", DAY)
    assert [charts.bucket_name(b) for b in (H, 6 * H, DAY, 7 * DAY)] == \
        ["hour", "6 hours", "day", "week"]
    assert charts.bucket_name(1.5 * 7 * DAY) == "10.5 d"
