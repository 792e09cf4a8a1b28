"""`trainguard fleet` on imported histories, as an operator runs it: the figures of a history
small enough to work out by hand, the planning rows, the window options, --no-plan, --html,
choosing a history, and the errors (one line, exit 2, no store created). A few cases run the
real CLI as a subprocess; the rest use typer's runner on the same app."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cli_run import one_error_line, tg
from typer.testing import CliRunner, Result

from trainguard.cli.main import app

DAY = 86400.0
FLEET = 10
WINDOW_DAYS = 10.0
runner = CliRunner()

# Seven faults on four of ten nodes, in relative days; imported with --window-end 10.
FAULTS = [  # node, start day, end day, type
    ("n1", 1.0, 2.0, "GPU"),
    ("n2", 2.0, 2.25, "NIC"),
    ("n1", 3.0, 3.5, "GPU"),
    ("n3", 4.0, 5.0, "PSU"),
    ("n2", 5.0, 5.5, "NIC"),
    ("n1", 6.0, 8.0, "GPU"),
    ("n4", 7.0, 7.5, "GPU"),
]
CSV = "node,start,end,type\n" + "".join(f"{n},{s},{e},{t}\n" for n, s, e, t in FAULTS)
ORIGIN = "2024-03-30"


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def import_history(tmp_path: Path, db: Path, *extra: str, name: str = "small",
                   fleet_size: int = FLEET) -> None:
    trace = tmp_path / f"{name}.csv"
    trace.write_text(CSV, encoding="utf-8")
    result = invoke("history", "import", trace, "--time-unit", "days",
                    "--fleet-size", str(fleet_size), "--window-end", str(WINDOW_DAYS),
                    "--name", name, "--db", db, *extra)
    assert result.exit_code == 0, result.output


@pytest.fixture
def db(tmp_path: Path) -> Path:
    store = tmp_path / "s.db"
    import_history(tmp_path, store, "--origin", ORIGIN)
    return store


def fleet_json(db: Path, *args: str) -> dict[str, Any]:
    result = invoke("fleet", "--db", db, "--json", *args)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


# --- the figures, by hand -----------------------------------------------------------------------


def test_figures_match_the_hand_computed_values(db: Path, tmp_path: Path) -> None:
    """The real CLI, --json: every figure below is worked out from FAULTS here."""
    proc = tg("fleet", "--db", db, "--json", "--job-sizes", "2,4,8,16", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    fleet = doc["fleet"]
    node_days = FLEET * WINDOW_DAYS
    assert doc["window"]["node_days"] == pytest.approx(node_days)
    assert fleet["counts"]["faults"] == len(FAULTS)

    rate = len(FAULTS) / node_days                         # 7 / 100 node-days
    overall = fleet["rates"]["overall"]
    assert overall["per_node_day"] == pytest.approx(rate)
    assert overall["low"] < rate < overall["high"]
    by_type = Counter(t for *_, t in FAULTS)
    assert {r["category"]: r["per_node_day"] for r in fleet["rates"]["by_category"]} == \
        pytest.approx({t: n / node_days for t, n in by_type.items()})

    mtbf_days = 1.0 / rate                                 # 14.29 days per node
    assert fleet["mtbf"]["node"]["mtbf_days"] == pytest.approx(mtbf_days)
    jobs = {m["job_nodes"]: m["mtbf_days"] for m in fleet["mtbf"]["jobs"]}
    assert jobs == pytest.approx({n: mtbf_days / n for n in (1, 2, 4, 8, FLEET)})
    assert fleet["mtbf"]["job_sizes_dropped"] == [16]

    repairs = [e - s for _, s, e, _ in FAULTS]
    overall_repair = fleet["repairs"]["overall"]
    assert overall_repair["median_days"] == pytest.approx(statistics.median(repairs))
    assert overall_repair["mean_days"] == pytest.approx(statistics.mean(repairs))
    assert overall_repair["max_days"] == pytest.approx(max(repairs))
    assert overall_repair["count"] == len(FAULTS) and overall_repair["open"] == 0

    # No node has two faults at once, so down node-time is the sum of the repairs.
    assert fleet["nodes_down"]["mean"] == pytest.approx(sum(repairs) / WINDOW_DAYS)
    assert fleet["nodes_down"]["max"] == 2                 # n1 (6-8) and n4 (7-7.5)

    per_node = sorted(Counter(n for n, *_ in FAULTS).values(), reverse=True)
    top = fleet["lemons"]["top_k"]
    assert top["nodes"] == 3 and top["share"] == pytest.approx(sum(per_node[:3]) / len(FAULTS))
    assert fleet["report_comparison"]["top3"]["share"] == pytest.approx(6 / 7)

    planning = doc["planning"]
    assert [s["nodes"] for s in planning["sizes"]] == [2, 4, 8]
    assert [s["nodes"] for s in planning["skipped"]] == [16]
    for size in planning["sizes"]:
        assert 0.0 < size["ettr"]["model"] <= 1.0 and 0.0 < size["ettr"]["replay"] <= 1.0
        assert size["answer_from"] in ("model", "replay")
        assert size["interval_s"]["daly"] > 0


def test_terminal_output_has_the_three_sections(db: Path) -> None:
    result = invoke("fleet", "--db", db, "--job-sizes", "2,4")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert f"history 'small': {FLEET} nodes, 10.0 days (100 node-days)" in text
    for section in ("fleet figures", "Planning answers", "Model vs replay"):
        assert section in text


def test_the_name_is_printed_as_given(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    import_history(tmp_path, store, name="[red]rack")
    result = invoke("fleet", "--db", store, "--no-plan")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("history '[red]rack': 10 nodes")


# --- the window ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "lo", "hi"), [
    (("--since", "5d"), 5.0, 10.0),
    (("--until", "5d"), 0.0, 5.0),
    (("--since", "2024-04-02", "--until", "2024-04-07"), 3.0, 8.0),
    (("--since", "2d", "--until", "2024-05-30"), 2.0, 10.0),
], ids=["since-duration", "until-duration", "iso-dates", "until-clamped"])
def test_since_and_until_restrict_the_window(db: Path, args: tuple[str, ...], lo: float,
                                            hi: float) -> None:
    doc = fleet_json(db, "--no-plan", *args)
    origin = datetime.fromisoformat(ORIGIN + "T00:00:00+00:00").timestamp()
    assert (doc["window"]["start"], doc["window"]["end"]) == (origin + lo * DAY,
                                                              origin + hi * DAY)
    counted = [f for f in FAULTS if lo <= f[1] < hi]
    assert doc["fleet"]["counts"]["faults"] == len(counted)
    assert doc["window"]["node_days"] == pytest.approx(FLEET * (hi - lo))
    assert doc["fleet"]["rates"]["overall"]["per_node_day"] == \
        pytest.approx(len(counted) / (FLEET * (hi - lo)))


@pytest.mark.parametrize(("args", "says"), [
    (("--since", "20d"), "leave nothing"),
    (("--since", "5d", "--until", "3d"), "leave nothing"),
    (("--until", "soonish"), "--until 'soonish'"),
])
def test_a_window_option_that_leaves_nothing(db: Path, args: tuple[str, ...],
                                             says: str) -> None:
    result = invoke("fleet", "--db", db, *args)
    assert result.exit_code == 2
    assert says in one_error_line(result.stderr, result.output)


# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", ["8,x", "8,,16", "0,8"])
def test_bad_job_sizes(db: Path, sizes: str) -> None:
    result = invoke("fleet", "--db", db, "--job-sizes", sizes)
    assert result.exit_code == 2
    assert "--job-sizes" in one_error_line(result.stderr, result.output)


def test_no_plan(db: Path) -> None:
    doc = fleet_json(db, "--no-plan")
    assert doc["planning"] is None and doc["fleet"]["counts"]["faults"] == len(FAULTS)
    result = invoke("fleet", "--db", db, "--no-plan")
    assert result.exit_code == 0
    assert "fleet figures" in result.stdout and "Planning answers" not in result.stdout


def test_html_page_has_the_fleet_and_planning_sections(db: Path, tmp_path: Path) -> None:
    page = tmp_path / "out" / "fleet.html"
    result = invoke("fleet", "--db", db, "--job-sizes", "2,4", "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert text.lstrip().lower().startswith("<!doctype html")
    assert "<h2>Fleet figures</h2>" in text and "<h2>Planning answers</h2>" in text
    assert "small" in text
    page.unlink()
    result = invoke("fleet", "--db", db, "--no-plan", "--html", page)
    assert result.exit_code == 0
    text = page.read_text(encoding="utf-8")
    assert "<h2>Fleet figures</h2>" in text and "<h2>Planning answers</h2>" not in text


def test_html_to_an_unwritable_place(db: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = invoke("fleet", "--db", db, "--no-plan", "--html", blocker / "fleet.html")
    assert result.exit_code == 2
    one_error_line(result.stderr, result.output)


# --- which history ------------------------------------------------------------------------------


def test_history_chooses_and_the_newest_is_the_default(db: Path, tmp_path: Path) -> None:
    import_history(tmp_path, db, name="bigger", fleet_size=40)
    assert fleet_json(db, "--no-plan")["history"]["name"] == "bigger"
    doc = fleet_json(db, "--no-plan", "--history", "small")
    assert doc["history"]["name"] == "small" and doc["history"]["fleet_size"] == FLEET
    assert fleet_json(db, "--no-plan", "--history", "bigger")["history"]["fleet_size"] == 40


def test_an_unknown_history_lists_the_names(db: Path, tmp_path: Path) -> None:
    import_history(tmp_path, db, name="bigger", fleet_size=40)
    result = invoke("fleet", "--db", db, "--history", "smal")
    assert result.exit_code == 2
    line = one_error_line(result.stderr, result.output)
    assert "'smal'" in line and "small" in line and "bigger" in line


# --- no history ---------------------------------------------------------------------------------


def test_an_empty_store_says_how_to_import(tmp_path: Path) -> None:
    """A store with no history (the only one deleted): a clear message, exit 2."""
    store = tmp_path / "s.db"
    import_history(tmp_path, store)
    assert invoke("history", "delete", "small", "--db", store).exit_code == 0
    proc = tg("fleet", "--db", store, cwd=tmp_path)
    assert proc.returncode == 2
    assert "trainguard history import" in one_error_line(proc.stderr, proc.stdout)


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    store = tmp_path / "none.db"
    proc = tg("fleet", "--db", store, cwd=tmp_path)
    assert proc.returncode == 2
    assert "no trainguard store" in one_error_line(proc.stderr, proc.stdout)
    assert not store.exists()
    proc = tg("history", "list", "--db", store, cwd=tmp_path)
    assert proc.returncode == 2
    assert "no trainguard store" in one_error_line(proc.stderr, proc.stdout)
    assert not store.exists()
