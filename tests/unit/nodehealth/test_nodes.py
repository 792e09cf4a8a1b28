"""Node-health memory built from the store, and the `trainguard nodes` command."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.nodehealth.nodes import exclusion_concentration, listed_state, node_health
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity

runner = CliRunner()


def xid_event(host: str, t: float) -> FailureEvent:
    return FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
                        severity=Severity.FATAL, signature="xid", summary="XID 79", xid=79,
                        host=host, time=t, time_kind=TimeKind.ABSOLUTE)


def failed_attempt(store: Store, session: int, index: int, culprit: str, category: str,
                   t: float, **extra: object) -> None:
    aid = store.create_attempt(session, index=index, nodes=["n1", "n2", "n3"], started=t)
    store.finish_attempt(aid, ended=t + 1, status="failed", failure_category=category,
                         detail={"failure": {"category": category, "culprit_nodes": [culprit],
                                             "summary": f"{category} on {culprit}",
                                             "node_fault": category == "gpu_hardware",
                                             **extra}})


def test_node_health_from_the_store(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "tg.db")) as store:
        s1 = store.create_session("a", backend="slurm", started=0.0)
        s2 = store.create_session("b", backend="slurm", started=50.0)
        failed_attempt(store, s1, 0, "n2", "gpu_hardware", 10.0)
        store.add_events([xid_event("n2", 10.0)], session_id=s1)
        store.add_exclusion("n2", reason="XID 79", created=11.0, session_id=s1)
        failed_attempt(store, s2, 0, "n2", "nccl_timeout_hang", 60.0)
        failed_attempt(store, s2, 1, "n3", "user_code_error", 70.0)  # not the node's fault
        store.add_alert(node="n1", start=80.0, end=None, peak_score=9.0, kind="predictive")
        health = {h.node: h for h in node_health(store, now=100.0)}
        assert health["n2"].excluded and health["n2"].exclusion_reason == "XID 79"
        # the XID took a job down; the hang only made n2 a suspect (an older record: read by
        # its category, never more than a suspicion)
        assert (health["n2"].xids, health["n2"].exclusions, health["n2"].jobs_taken_down,
                health["n2"].suspicions) == (1, 1, 1, 1)
        assert health["n2"].lemon and health["n2"].lemon_score >= 2.0
        assert health["n3"].jobs_taken_down == 0 and not health["n3"].lemon
        assert health["n1"].alerts == 1 and not health["n1"].excluded
        assert next(iter(node_health(store, now=100.0))).node == "n2"  # worst first
        assert exclusion_concentration(store).top_k_share == 1.0


def test_nodes_cli_exclude_list_release(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    hostile = 'xid 79; $(reboot) "quoted"'
    r = runner.invoke(app, ["nodes", "exclude", "node7", "--reason", hostile, "--db", db])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["nodes", "--json", "--db", db])
    doc = json.loads(r.stdout)
    (node,) = doc["nodes"]
    assert node["node"] == "node7" and node["excluded"] and node["exclusion_reason"] == hostile
    r = runner.invoke(app, ["nodes", "--db", db])
    assert r.exit_code == 0 and "node7" in r.stdout and "excluded" in r.stdout
    r = runner.invoke(app, ["nodes", "release", "node7", "--db", db])
    assert r.exit_code == 0
    r = runner.invoke(app, ["nodes", "release", "node7", "--db", db])
    assert r.exit_code == 2 and "no active exclusion" in r.stderr  # input, not an outcome
    with Store.open(db) as store:
        assert store.active_excluded_nodes() == set()


def test_json_and_table_agree_on_each_nodes_state(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        sid = store.create_session("job", backend="local", started=1.0)
        store.create_attempt(sid, index=0, nodes=["n1"], started=1.0)  # nothing recorded
        store.upsert_node("n2", state="drain", seen=1.0)              # a scheduler's state
        store.add_exclusion("n3", reason="XID 79", created=2.0, source="operator")
    r = runner.invoke(app, ["nodes", "--json", "--db", db])
    assert r.exit_code == 0, r.output
    states = {n["node"]: n["state"] for n in json.loads(r.stdout)["nodes"]}
    assert states == {"n1": "ok", "n2": "drain", "n3": "excluded"}
    r = runner.invoke(app, ["nodes", "--db", db])
    rows = {line.split()[1]: line.split()[3] for line in r.stdout.splitlines()
            if line.startswith("│ n")}
    assert rows == states


def test_listed_state() -> None:
    assert listed_state(False, None) == "ok"
    assert listed_state(False, "drain") == "drain"
    assert listed_state(True, "ok") == "excluded"


def test_node_health_records_what_the_supervisor_decided(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "tg.db")) as store:
        s1 = store.create_session("a", backend="local", started=0.0)
        # a hang's likely culprit: a suspicion, not a job taken down
        failed_attempt(store, s1, 0, "n1", "collective_hang", 10.0, implication="suspect",
                       implicated_nodes=["n1"])
        # a job-level failure, an injected kill, a process stopped from outside: no strike
        failed_attempt(store, s1, 1, "n2", "collective_hang", 20.0, implication="none",
                       implicated_nodes=[])
        failed_attempt(store, s1, 2, "n2", "injected_fault", 30.0, implication="none",
                       implicated_nodes=[])
        # hardware evidence: the job was taken down by the node
        failed_attempt(store, s1, 3, "n3", "gpu_hardware", 40.0, implication="fault",
                       implicated_nodes=["n3"])
        health = {h.node: h for h in node_health(store, now=50.0)}
        assert (health["n1"].jobs_taken_down, health["n1"].suspicions) == (0, 1)
        assert (health["n2"].jobs_taken_down, health["n2"].suspicions) == (0, 0)
        assert health["n2"].lemon_score == 0.0
        assert (health["n3"].jobs_taken_down, health["n3"].suspicions) == (1, 0)
        assert 0 < health["n1"].lemon_score < health["n3"].lemon_score
        r = runner.invoke(app, ["nodes", "--json", "--db", str(tmp_path / "tg.db")])
        assert r.exit_code == 0
        by_node = {n["node"]: n for n in json.loads(r.stdout)["nodes"]}
        assert by_node["n1"]["suspicions"] == 1 and by_node["n1"]["jobs_taken_down"] == 0


def test_an_xid_from_plain_dmesg_counts_without_a_1970_date(tmp_path: Path) -> None:
    # `logs classify --db` of plain dmesg: the XID's time is seconds since boot
    boot = FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
                        severity=Severity.FATAL, signature="xid_79", summary="XID 79",
                        time=1234.5, time_kind=TimeKind.RELATIVE, host="n9", xid=79)
    with Store.open(str(tmp_path / "tg.db")) as store:
        store.add_events([boot, xid_event("n8", 1_700_000_000.0)])
        health = {h.node: h for h in node_health(store, now=1_700_000_100.0)}
    assert health["n9"].xids == 1 and health["n9"].last_evidence_time is None
    assert health["n8"].xids == 1 and health["n8"].last_evidence_time == 1_700_000_000.0
