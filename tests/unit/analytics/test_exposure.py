"""Rates and intervals are shown only with enough exposure; otherwise "too little data (...)",
in the report (terminal rows, HTML) and in `advise checkpoint-interval`, while --json keeps the
raw figures with the exposure and a flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.analytics import build_report
from trainguard.analytics.exposure import (
    ExposurePolicy,
    interval_support,
    rate_support,
)
from trainguard.cli.advise import app
from trainguard.errors import ConfigError
from trainguard.report.summary import summary_rows
from trainguard.store import Store

runner = CliRunner()
PHASES = {"launch": 0.5, "imports": 3.0, "dist_init": 1.0, "first_step": 0.5}


def history(store: Store, *, attempt_s: float, failures: int, nodes: int,
            ckpt_every_s: float) -> None:
    """One supervised session through the SDK: ``failures`` failed attempts then a success, each
    ``attempt_s`` long on ``nodes`` nodes, saving a checkpoint every ``ckpt_every_s``."""
    names = [f"n{i}" for i in range(nodes)]
    sid = store.create_session("job", backend="local", started=0.0)
    t = 0.0
    for i in range(failures + 1):
        aid = store.create_attempt(sid, index=i, nodes=names, started=t)
        saved = t + ckpt_every_s
        while saved < t + attempt_s:
            store.add_checkpoint(session_id=sid, attempt_id=aid, step=int(saved), path="c",
                                 created=saved, size_bytes=10**9, save_s=2.0, blocking_s=1.0)
            saved += ckpt_every_s
        end = t + attempt_s
        failed = i < failures
        store.finish_attempt(
            aid, ended=end, status="failed" if failed else "succeeded",
            failure_category="gpu_hardware" if failed else None, startup_phases=PHASES,
            detail={"failure": {"kind": "crash", "culprit_nodes": []} if failed else None,
                    "failed_at": end - 1.0 if failed else None, "last_step": 10})
        t = end + 5.0


def rows(store: Store) -> dict[str, str]:
    return dict(summary_rows(build_report(store, now=1e9)))


@pytest.mark.parametrize(("failures", "node_s", "ok"), [
    (2, 72.0, False), (2, 86399.0, False), (2, 86400.0, True), (0, 10 * 86400.0, True),
    (0, 0.0, False)])
def test_rate_support(failures: int, node_s: float, ok: bool) -> None:
    support = rate_support(failures, node_s)
    assert support.supported is ok
    assert (support.caveat is None) is ok
    if not ok:
        assert support.caveat is not None and support.caveat.startswith("too little data (")


@pytest.mark.parametrize(("failures", "node_s", "training_s", "interval_s", "ok"), [
    (3, 86400.0, 5000.0, 1000.0, True),
    (2, 86400.0, 5000.0, 1000.0, False),      # too few failures
    (3, 86400.0, 4999.0, 1000.0, False),      # the interval is over a fifth of the history
    (9, 86399.0, 1e9, 1.0, False),            # the rate under it is not supported
])
def test_interval_support(failures: int, node_s: float, training_s: float, interval_s: float,
                          ok: bool) -> None:
    assert interval_support(failures, node_s, training_s, interval_s).supported is ok


def test_policy_is_configurable_and_validated() -> None:
    lax = ExposurePolicy(min_node_s=60.0, min_failures=1, min_intervals=1.0)
    assert rate_support(2, 72.0, policy=lax).supported
    with pytest.raises(ConfigError, match=r"exposure\.min_failures"):
        ExposurePolicy(min_failures=-1)


def test_seconds_of_data_show_no_rate_and_no_interval(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "short.db")) as store:
        history(store, attempt_s=8.0, failures=2, nodes=3, ckpt_every_s=2.0)
        report = build_report(store, now=1e9)
        shown = rows(store)
    # the raw figures are still computed (and kept for --json) ...
    assert report.failures.per_node_day is not None and report.failures.per_node_day > 1000
    assert report.advice is not None and report.advice.optimal_interval_s < 60
    # ... but the terminal/HTML rows say why they are not shown
    assert "per node-day" in shown["failures"] and "too little data (" in shown["failures"]
    assert f"{report.failures.per_node_day:.3g}" not in shown["failures"]
    assert shown["best checkpoint interval (model)"].startswith("too little data (")
    doc = report.to_dict()
    assert doc["failures"]["per_node_day"] == round(report.failures.per_node_day, 4)
    assert doc["failures"]["rate_support"]["supported"] is False
    assert doc["failures"]["rate_support"]["exposure_node_s"] == pytest.approx(3 * 3 * 8.0)
    assert doc["advice_support"]["supported"] is False
    assert doc["advice"]["optimal_interval_s"] is not None


def test_enough_exposure_shows_rate_and_interval(tmp_path: Path) -> None:
    # 4 failures, 8 nodes x 5 attempts x 6 h = 240 node-hours
    with Store.open(str(tmp_path / "long.db")) as store:
        history(store, attempt_s=6 * 3600.0, failures=4, nodes=8, ckpt_every_s=600.0)
        report = build_report(store, now=1e9)
        shown = rows(store)
    assert report.rate_support is not None and report.rate_support.supported
    assert report.advice_support is not None and report.advice_support.supported
    assert report.failures.per_node_day is not None
    assert f"{report.failures.per_node_day:.3g} per node-day" in shown["failures"]
    assert "too little data" not in " ".join(shown.values())
    assert "-> ETTR" in shown["best checkpoint interval (model)"]


def test_advise_too_little_data(tmp_path: Path) -> None:
    db = str(tmp_path / "short.db")
    with Store.open(db) as store:
        history(store, attempt_s=8.0, failures=2, nodes=3, ckpt_every_s=2.0)
    text = runner.invoke(app, ["checkpoint-interval", "--db", db])
    assert text.exit_code == 0, text.output
    assert "optimum: too little data (" in text.output
    assert "expected ETTR by checkpoint interval" not in text.output
    doc = json.loads(runner.invoke(app, ["checkpoint-interval", "--db", db, "--json"]).stdout)
    assert doc["supported"] is False
    assert doc["support"]["exposure_node_s"] == pytest.approx(72.0)
    assert doc["optimal_interval_s"] is not None  # the raw figure, for scripts
    # a rate the user gives needs no exposure from the store
    given = runner.invoke(app, ["checkpoint-interval", "--db", db,
                                "--failures-per-node-day", "0.01"])
    assert given.exit_code == 0 and "optimum: checkpoint every" in given.output


def test_advise_enough_data(tmp_path: Path) -> None:
    db = str(tmp_path / "long.db")
    with Store.open(db) as store:
        history(store, attempt_s=6 * 3600.0, failures=4, nodes=8, ckpt_every_s=600.0)
    text = runner.invoke(app, ["checkpoint-interval", "--db", db])
    assert text.exit_code == 0, text.output
    assert "optimum: checkpoint every" in text.output and "current" in text.output
    doc = json.loads(runner.invoke(app, ["checkpoint-interval", "--db", db, "--json"]).stdout)
    assert doc["supported"] is True and doc["support"]["failures"] == 4
