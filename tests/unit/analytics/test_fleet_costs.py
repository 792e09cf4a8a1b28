"""`trainguard fleet` takes its planning costs from the store's own runs when they are not
given, and says where each came from (given / measured / assumed)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.planning.costs import DEFAULT_RESTART_S, choose_cost

runner = CliRunner()
CSV = "node,start,end,type\nn1,1,2,GPU\nn2,3,3.5,NIC\n"


def _fleet(db: str, *extra: str) -> dict[str, object]:
    result = runner.invoke(app, ["fleet", "--db", db, "--json", "--replays", "1",
                                 "--job-sizes", "8", *extra])
    assert result.exit_code == 0, result.output
    costs: dict[str, object] = json.loads(result.stdout)["planning"]["costs"]
    return costs


def _import(db: str, tmp_path: Path) -> None:
    trace = tmp_path / "h.csv"
    trace.write_text(CSV)
    result = runner.invoke(app, ["history", "import", str(trace), "--fleet-size", "20",
                                 "--time-unit", "days", "--window-end", "10", "--db", db])
    assert result.exit_code == 0, result.output


def test_costs_measured_from_the_runs_in_the_store(fleet_db: tuple[str, dict[str, int]],
                                                   tmp_path: Path) -> None:
    db, _ = fleet_db
    _import(db, tmp_path)
    costs = _fleet(db)
    assert costs["save"] == {"seconds": 6.0, "source": "measured: median checkpoint stall "
                             "(blocking_s, else save_s) (5 samples)"}
    assert costs["restart"]["seconds"] == 127.5  # type: ignore[index]
    given = _fleet(db, "--save-s", "90", "--restart-s", "2m")
    assert given == {"save": {"seconds": 90.0, "source": "given"},
                     "restart": {"seconds": 120.0, "source": "given"}}


def test_costs_assumed_without_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    _import(db, tmp_path)
    costs = _fleet(db)
    assert costs["restart"] == {"seconds": DEFAULT_RESTART_S, "source": "assumed: no "
                                "measurement in the store; give --restart-s"}


def test_choose_cost_prefers_given_then_measured() -> None:
    assert choose_cost(5.0, None, 60.0, "--x").source == "given"
    assert choose_cost(None, None, 60.0, "--x").seconds == 60.0
