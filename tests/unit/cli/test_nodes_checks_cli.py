"""`trainguard nodes` shows each host's last host check (level, age, reason), also in --json."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from trainguard.check.checker import CheckReport
from trainguard.check.model import Figure, Finding, Level, ProbeResult, Status
from trainguard.cli.main import app
from trainguard.cli.nodes import check_cell
from trainguard.store import HostCheckRecord, Store, resolve_db_url

runner = CliRunner()


def report(started: float, slow_reason: str = "gemm 12.1 GFLOP/s, 0.21x the median 57.3"
           ) -> CheckReport:
    results = (ProbeResult("gemm", "node1", Status.OK, (Figure("gemm_gflops", 57.3, "GFLOP/s"),)),
               ProbeResult("gemm", "node2", Status.OK, (Figure("gemm_gflops", 12.1, "GFLOP/s"),)))
    findings = (Finding("node1", "host", Level.PASS, "gemm", "gemm 57.3 GFLOP/s"),
                Finding("node2", "host", Level.SLOW, "gemm", slow_reason, "gemm_gflops", 12.1,
                        57.3))
    return CheckReport(("node1", "node2"), results, findings,
                       {"node1": Level.PASS, "node2": Level.SLOW}, 0, started, 30.0)


def nodes_json(db: str) -> dict[str, dict[str, object]]:
    r = runner.invoke(app, ["nodes", "--json", "--db", db])
    assert r.exit_code == 0, r.output
    return {n["node"]: n for n in json.loads(r.stdout)["nodes"]}


def test_nodes_without_checks_show_none(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        store.upsert_node("node7", state="ok", seen=1.0)
    assert nodes_json(db)["node7"]["last_check"] is None
    r = runner.invoke(app, ["nodes", "--db", db])
    assert r.exit_code == 0, r.output
    assert "last check" in r.stdout and "node7" in r.stdout
    assert "pass" not in r.stdout and "ago" not in r.stdout


def test_nodes_show_the_last_check(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    now = time.time()
    with Store.open(db) as store:
        store.upsert_node("node1", state="ok", seen=now)
        store.add_host_checks(report(now - 7 * 3600, slow_reason="older reason"))
        store.add_host_checks(report(now - 3600), context="check")
    doc = nodes_json(db)
    # node2 is known only from its checks and is listed all the same
    assert sorted(doc) == ["node1", "node2"]
    n1, n2 = doc["node1"]["last_check"], doc["node2"]["last_check"]
    assert isinstance(n1, dict) and isinstance(n2, dict)
    assert n1["level"] == "pass" and n1["reason"] == ""
    assert n2["level"] == "slow" and n2["reason"] == "gemm 12.1 GFLOP/s, 0.21x the median 57.3"
    assert n2["context"] == "check" and n2["duration_s"] == 30.0
    assert n2["checked_at"] == pytest.approx(now - 3600)
    assert 3600 <= float(n2["age_s"]) < 3700
    r = runner.invoke(app, ["nodes", "--db", db])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "slow 60." in text and "min ago: gemm 12.1 GFLOP/s" in text
    assert "older reason" not in text
    assert "pass 60." in text


def test_nodes_check_reason_is_terminal_safe(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    hostile = "disk [bold]slow[/bold] \x1b]0;pwned\x07\x1b[31mred"
    with Store.open(db) as store:
        store.add_host_checks(report(time.time() - 10, slow_reason=hostile))
    r = runner.invoke(app, ["nodes", "--db", db])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "[bold]slow[/bold]" in r.stdout  # shown as text, not taken as markup
    assert nodes_json(db)["node2"]["last_check"]["reason"] == hostile  # type: ignore[index]


def test_nodes_on_a_store_older_than_host_checks(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        store.upsert_node("node7", state="ok", seen=1.0)
    engine = sa.create_engine(resolve_db_url(db))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE host_checks"))
    finally:
        engine.dispose()
    assert nodes_json(db)["node7"]["last_check"] is None
    engine = sa.create_engine(resolve_db_url(db))
    try:  # the read-only listing did not add the table back
        assert not sa.inspect(engine).has_table("host_checks")
    finally:
        engine.dispose()


@pytest.mark.parametrize(("level", "reason", "shown", "hidden"), [
    ("pass", "clock offset +0.1 ms", "pass[/green] 2.0 min ago", "clock offset"),
    ("fail", "storage: fsync: EIO", "fail[/bold red] 2.0 min ago: storage: fsync: EIO", ""),
    ("skipped", "no GPU", "skipped[/dim] 2.0 min ago: no GPU", ""),
])
def test_check_cell(level: str, reason: str, shown: str, hidden: str) -> None:
    record = HostCheckRecord(1, "n", 1000.0, 5.0, level, reason, "check", None, (), ())
    cell = check_cell(record, now=1120.0)
    assert shown in cell
    if hidden:
        assert hidden not in cell


def test_check_cell_cuts_a_long_reason() -> None:
    record = HostCheckRecord(1, "n", 0.0, 5.0, "slow", "x" * 500, "check", None, (), ())
    cell = check_cell(record, now=10.0)
    assert "x" * 79 + "…" in cell and "x" * 80 not in cell
    assert check_cell(None, now=10.0) == "-"
