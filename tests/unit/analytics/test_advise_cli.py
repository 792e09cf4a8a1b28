"""`advise checkpoint-interval`, invoked on the sub-app directly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.advise import app
from trainguard.store import Store

runner = CliRunner()
GIVEN = ["--nodes", "64", "--failures-per-node-day", "0.01", "--write-s", "30",
         "--restart-s", "600"]


@pytest.mark.parametrize("args", [["--help"], ["checkpoint-interval", "--help"]])
def test_help(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0
    assert "checkpoint" in result.output


def test_all_given_needs_no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["checkpoint-interval", *GIVEN])
    assert result.exit_code == 0, result.output
    assert "optimum: checkpoint every 47.5 min" in result.output
    assert "Young/Daly" in result.output
    assert "(given)" in result.output
    assert not (tmp_path / "trainguard.db").exists()


def test_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["checkpoint-interval", *GIVEN, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    lam = 64 * 0.01 / 86400
    assert doc["young_daly_s"] == pytest.approx(math.sqrt(2 * 30 / lam), abs=1e-3)
    assert doc["optimal_interval_s"] == pytest.approx(doc["young_daly_s"], rel=0.01)
    assert doc["inputs"]["nodes"] == {"value": 64.0, "source": "given", "samples": None,
                                      "what": None}
    assert {r["label"] for r in doc["table"]} >= {"optimum", "Young/Daly"}


def test_measured_from_store(fleet_db: tuple[str, dict[str, int]]) -> None:
    db, _ = fleet_db
    result = runner.invoke(app, ["checkpoint-interval", "--db", db, "--nodes", "8", "--json"])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.stdout)["inputs"]
    assert inputs["nodes"]["source"] == "given"
    assert inputs["write_s"] == {"value": 6.0, "source": "measured", "samples": 5,
                                 "what": "median checkpoint stall (blocking_s, else save_s)"}
    assert inputs["restart_s"]["value"] == 127.5 and inputs["restart_s"]["samples"] == 4
    assert inputs["failures_per_node_day"]["samples"] == 5
    text = runner.invoke(app, ["checkpoint-interval", "--db", db])
    assert text.exit_code == 0, text.output
    assert "measured: median checkpoint stall" in text.output
    assert "5 sample(s)" in text.output
    # the fleet's 5 failures come from 15 node-hours: too little exposure for a rate per node-day
    assert "too little data (15.00 h of node time" in text.output
    assert "current" not in text.output


def test_not_measurable_is_one_clear_line(tmp_path: Path) -> None:
    db = str(tmp_path / "empty.db")
    with Store.open(db) as store:
        sid = store.create_session("ok", backend="local", started=0.0)
        aid = store.create_attempt(sid, index=0, nodes=["a"], started=0.0)
        store.finish_attempt(aid, ended=100.0, status="succeeded")
    result = runner.invoke(app, ["checkpoint-interval", "--db", db, "--write-s", "10"])
    assert result.exit_code == 2  # the command could not do its work: its input lacks data
    assert "cannot measure failures_per_node_day, restart_s" in result.output
    assert "--failures-per-node-day, --restart-s" in result.output
    assert "Traceback" not in result.output


def test_bad_value_rejected() -> None:
    result = runner.invoke(app, ["checkpoint-interval", *GIVEN[:-1], "-5"])
    assert result.exit_code == 2
