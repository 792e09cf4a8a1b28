"""Slurm job history: real jobcomp / squeue --json captures -> SlurmJob -> store sessions."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC
from pathlib import Path

import pytest

from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.slurm import (
    SlurmCommands,
    SlurmJob,
    import_history,
    load_history,
    parse_jobcomp,
    parse_sacct,
    parse_squeue_json,
    plan_sessions,
)
from trainguard.recover.slurm.history import (
    SACCT_FIELDS,
    failure_category,
    parse_exit_code,
    parse_slurm_time,
)
from trainguard.store import Store

DATA = Path(__file__).resolve().parents[3] / "data" / "slurm"
T0 = 1795275584.0  # 2026-11-21T15:39:44Z: ok-job's start in both captures


@pytest.fixture
def jobcomp_jobs() -> list[SlurmJob]:
    return parse_jobcomp((DATA / "jobcomp.txt").read_text(), tz=UTC)


@pytest.fixture
def squeue_jobs() -> list[SlurmJob]:
    return parse_squeue_json((DATA / "squeue_all.json").read_text())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(str(tmp_path / "tg.db")) as s:
        yield s


def by_id(jobs: Sequence[SlurmJob]) -> dict[str, list[SlurmJob]]:
    out: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        out.setdefault(job.job_id, []).append(job)
    return out


# -- parsing ------------------------------------------------------------------------------------


def test_jobcomp_records(jobcomp_jobs: list[SlurmJob]) -> None:
    jobs = by_id(jobcomp_jobs)
    assert [j.job_id for j in jobcomp_jobs] == ["2", "3", "1", "4", "5", "7", "6", "8", "8",
                                                "9", "10"]
    ok = jobs["1"][0]
    assert ok == SlurmJob(job_id="1", name="ok-job", state="COMPLETED", exit_code=0, signal=None,
                          start=T0, end=T0 + 1, nodes=("node1", "node2"), restarts=0,
                          submit=T0, reason=None)
    assert (jobs["2"][0].state, jobs["2"][0].exit_code, jobs["2"][0].signal) == ("FAILED", 3, None)
    assert (jobs["3"][0].exit_code, jobs["3"][0].signal) == (0, 9)
    assert jobs["4"][0].name == "name with spaces"  # sacct -c loses this one
    assert jobs["7"][0].nodes == ()  # cancelled while pending: NodeList=(null)
    assert [(r.state, r.nodes) for r in jobs["8"]] == [
        ("NODE_FAIL", ("node1", "node2")), ("COMPLETED", ("node2", "node3"))]


def test_squeue_json_records(squeue_jobs: list[SlurmJob], jobcomp_jobs: list[SlurmJob]) -> None:
    jobs = {j.job_id: j for j in squeue_jobs}
    assert jobs["1"] == by_id(jobcomp_jobs)["1"][0]  # the two sources agree
    assert (jobs["2"].exit_code, jobs["2"].signal, jobs["2"].reason) == (3, None,
                                                                         "NonZeroExitCode")
    assert (jobs["3"].exit_code, jobs["3"].signal) == (0, 9)
    assert (jobs["5"].state, jobs["5"].signal) == ("CANCELLED", 15)
    assert (jobs["8"].restarts, jobs["8"].nodes) == (1, ("node2", "node3"))
    running, pending = jobs["9"], jobs["10"]
    assert (running.state, running.end, running.exit_code) == ("RUNNING", None, None)
    assert running.start is not None and running.nodes == ("node2", "node3", "node4")
    assert (pending.state, pending.start, pending.end, pending.nodes) == ("PENDING", None, None,
                                                                          ())
    assert pending.reason == "Resources"


def test_squeue_json_later_formats() -> None:
    """Slurm 23.02+ wraps numbers as {"set", "number"} and states as lists (synthetic sample)."""
    text = """{"jobs": [{"job_id": 5, "name": "x", "job_state": ["FAILED"],
        "exit_code": {"status": ["EXITED"], "return_code": {"set": true, "number": 2},
                      "signal": {"id": {"set": false, "number": 0}, "name": ""}},
        "start_time": {"set": true, "infinite": false, "number": 100},
        "end_time": {"set": true, "infinite": false, "number": 160},
        "submit_time": {"set": true, "infinite": false, "number": 90},
        "nodes": "n[1-2]", "restart_cnt": 0, "state_reason": "NonZeroExitCode"}]}"""
    (job,) = parse_squeue_json(text)
    assert job == SlurmJob(job_id="5", name="x", state="FAILED", exit_code=2, signal=None,
                           start=100.0, end=160.0, nodes=("n1", "n2"), submit=90.0,
                           reason="NonZeroExitCode")


@pytest.mark.parametrize("text", ["", "not json", '{"meta": {}}', "[]"])
def test_squeue_json_unreadable(text: str) -> None:
    with pytest.raises(LaunchError, match="squeue --json: unreadable"):
        parse_squeue_json(text)


# sacct with slurmdbd is not available on the test cluster: a synthetic sample in the format of
# `sacct -P -n -X -D --format=JobID,State,ExitCode,Start,End,NodeList,Submit,Reason,JobName`.
SACCT = """\
12|COMPLETED|0:0|2026-01-02T03:04:05|2026-01-02T04:00:00|gpu[01-02]|2026-01-02T03:00:00|None|llama|70b
13|NODE_FAIL|0:0|2026-01-02T05:00:00|2026-01-02T05:10:00|gpu03|2026-01-02T04:59:00|None|rq
13|COMPLETED|0:0|2026-01-02T05:12:00|2026-01-02T06:00:00|gpu04|2026-01-02T05:10:00|None|rq
14|CANCELLED by 1000|0:15|2026-01-02T07:00:00|2026-01-02T07:01:00|gpu01|2026-01-02T07:00:00|None|c
15|PENDING|0:0|Unknown|Unknown|None assigned|2026-01-02T08:00:00|Priority|wait
16|OUT_OF_MEMORY|0:125|2026-01-02T09:00:00|2026-01-02T09:30:00|gpu02|2026-01-02T09:00:00|None|m
"""


def test_sacct_records() -> None:
    jobs = parse_sacct(SACCT, tz=UTC)
    assert len(SACCT_FIELDS) == 9
    assert jobs[0].name == "llama|70b"  # JobName is last: a delimiter in it survives
    assert jobs[0].nodes == ("gpu01", "gpu02")
    assert jobs[0].start == parse_slurm_time("2026-01-02T03:04:05", UTC)
    assert [j.state for j in jobs] == ["COMPLETED", "NODE_FAIL", "COMPLETED", "CANCELLED",
                                       "PENDING", "OUT_OF_MEMORY"]
    assert (jobs[3].signal, jobs[4].start, jobs[4].nodes, jobs[4].reason) == (15, None, (),
                                                                              "Priority")


def test_sacct_unexpected_line() -> None:
    with pytest.raises(LaunchError, match="sacct: unexpected line"):
        parse_sacct("12|COMPLETED\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-21T15:39:44", T0),
    ("Unknown", None), ("None", None), ("N/A", None), ("", None), (None, None),
    ("garbage", None),
])
def test_parse_slurm_time(text: str | None, expected: float | None) -> None:
    assert parse_slurm_time(text, UTC) == expected


def test_slurm_times_are_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_slurm_time("2026-11-21T10:39:44") == T0  # EST = UTC-5
        assert parse_slurm_time("2026-07-01T08:00:00") == parse_slurm_time(
            "2026-07-01T12:00:00", UTC)  # EDT = UTC-4
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(("text", "expected"), [
    ("0:0", (0, None)), ("3:0", (3, None)), ("0:9", (0, 9)), ("", (None, None)),
    ("x:y", (None, None)), ("1", (1, None)),
])
def test_parse_exit_code(text: str, expected: tuple[int | None, int | None]) -> None:
    assert parse_exit_code(text) == expected


@pytest.mark.parametrize(("state", "signal", "category"), [
    ("COMPLETED", None, None),
    ("CANCELLED", 15, None),
    ("RUNNING", None, None),
    ("FAILED", None, "unknown"),
    ("FAILED", 9, "oom_host"),
    ("FAILED", 11, "unknown"),
    ("NODE_FAIL", None, "scheduler_node_failure"),
    ("BOOT_FAIL", None, "scheduler_node_failure"),
    ("PREEMPTED", None, "scheduler_node_failure"),
    ("OUT_OF_MEMORY", None, "oom_host"),
    ("TIMEOUT", None, "unknown"),
    ("DEADLINE", None, "unknown"),
])
def test_failure_category(state: str, signal: int | None, category: str | None) -> None:
    assert failure_category(SlurmJob(job_id="1", name="j", state=state, signal=signal)) == category


# -- planning and import -------------------------------------------------------------------------


def test_plan_from_jobcomp(jobcomp_jobs: list[SlurmJob]) -> None:
    plans = {p.external_id: p for p in plan_sessions(jobcomp_jobs)}
    assert list(plans) == ["2", "3", "1", "4", "5", "7", "6", "8", "9", "10"]
    assert {k: p.status for k, p in plans.items()} == {
        "1": "succeeded", "2": "failed", "3": "failed", "4": "succeeded", "5": "cancelled",
        "6": "cancelled", "7": "cancelled", "8": "succeeded", "9": "cancelled", "10": "cancelled"}
    (fail,) = plans["2"].attempts
    assert (fail.index, fail.automatic, fail.status, fail.failure_category, fail.exit_codes) == (
        0, False, "failed", "unknown", {"job": 3})
    assert plans["3"].attempts[0].failure_category == "oom_host"
    assert plans["3"].attempts[0].exit_codes == {"job": -9}
    assert plans["7"].attempts == ()  # never ran
    first, second = plans["8"].attempts
    assert (first.index, first.automatic, first.status, first.failure_category, first.nodes) == (
        0, False, "failed", "scheduler_node_failure", ("node1", "node2"))
    assert (second.index, second.automatic, second.status, second.failure_category) == (
        1, True, "succeeded", None)
    assert second.nodes == ("node2", "node3")
    assert plans["8"].started == first.started and plans["8"].ended == second.ended


def test_plan_from_squeue_requeue_placeholder(squeue_jobs: list[SlurmJob]) -> None:
    plans = {p.external_id: p for p in plan_sessions(squeue_jobs)}
    placeholder, final = plans["8"].attempts
    assert placeholder.detail["placeholder"] is True
    assert (placeholder.index, placeholder.nodes, placeholder.status) == (0, (), "failed")
    assert placeholder.started == placeholder.ended == final.started - 11  # requeue = submit
    assert (final.index, final.automatic, final.status) == (1, True, "succeeded")
    running = plans["9"]
    assert (running.status, running.ended) == ("running", None)
    assert (running.attempts[0].status, running.attempts[0].ended) == ("running", None)
    assert running.attempts[0].exit_codes == {"job": None}
    assert plans["10"].attempts == () and plans["10"].status == "running"
    assert plans["5"].attempts[0].exit_codes == {"job": -15}


def test_import_jobcomp(store: Store, jobcomp_jobs: list[SlurmJob]) -> None:
    result = import_history(store, jobcomp_jobs)
    assert (result.imported, result.skipped, result.updated) == (10, 0, 0)
    sessions = {s.external_id: s for s in store.sessions()}
    assert len(sessions) == 10
    requeued = sessions["8"]
    assert (requeued.backend, requeued.name, requeued.status) == ("slurm", "requeue-job",
                                                                  "succeeded")
    attempts = store.attempts(requeued.id)
    assert [(a.index, a.automatic, a.status, a.failure_category, a.nodes) for a in attempts] == [
        (0, False, "failed", "scheduler_node_failure", ("node1", "node2")),
        (1, True, "succeeded", None, ("node2", "node3")),
    ]
    assert attempts[1].exit_codes == {"job": 0}
    assert attempts[0].detail["slurm_state"] == "NODE_FAIL"
    failed = store.attempts(sessions["2"].id)[0]
    assert (failed.exit_codes, failed.started, failed.ended) == ({"job": 3}, T0, T0 + 1)
    assert sessions["4"].name == "name with spaces"
    assert store.attempts(sessions["7"].id) == []


def test_import_is_idempotent(store: Store, jobcomp_jobs: list[SlurmJob]) -> None:
    import_history(store, jobcomp_jobs)
    again = import_history(store, jobcomp_jobs)
    assert (again.imported, again.skipped, again.updated) == (0, 10, 0)
    assert len(store.sessions()) == 10
    assert len(store.attempts()) == 9  # 7 jobs ran once, job 8 twice; 7 and 10 never ran


def test_other_backends_are_not_matched(store: Store, jobcomp_jobs: list[SlurmJob]) -> None:
    store.create_session("local job", backend="local", started=0.0, external_id="1")
    assert import_history(store, jobcomp_jobs).imported == 10


def test_running_jobs_are_completed_by_a_later_import(
    store: Store, squeue_jobs: list[SlurmJob], jobcomp_jobs: list[SlurmJob]
) -> None:
    first = import_history(store, squeue_jobs)
    assert (first.imported, first.skipped, first.updated) == (10, 0, 0)
    running = {s.external_id: s for s in store.sessions()}["9"]
    assert running.status == "running"
    later = import_history(store, jobcomp_jobs)
    assert (later.imported, later.skipped, later.updated) == (0, 8, 2)
    sessions = {s.external_id: s for s in store.sessions()}
    assert sessions["9"].status == "cancelled" and sessions["9"].ended is not None
    (attempt,) = store.attempts(sessions["9"].id)
    assert (attempt.status, attempt.ended) == ("cancelled", sessions["9"].ended)
    assert sessions["10"].status == "cancelled"
    assert store.attempts(sessions["10"].id) == []


def test_still_running_jobs_are_skipped(store: Store, squeue_jobs: list[SlurmJob]) -> None:
    import_history(store, squeue_jobs)
    again = import_history(store, squeue_jobs)
    assert (again.imported, again.skipped, again.updated) == (0, 10, 0)


# -- choosing the source -------------------------------------------------------------------------


class Slurm:
    """A fake runner: canned (returncode, stdout, stderr) per program; records argv."""

    def __init__(self, answers: Mapping[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        code, out, err = self.answers[argv[0]]
        return subprocess.CompletedProcess(list(argv), code, out, err)


NO_ACCOUNTING = (1, "", "Slurm accounting storage is disabled\n")


def config(jobcomp: Path | str) -> tuple[int, str, str]:
    return 0, f"JobCompType             = jobcomp/filetxt\nJobCompLoc = {jobcomp}\n", ""


def test_auto_prefers_sacct() -> None:
    runner = Slurm({"sacct": (0, SACCT, "")})
    history = load_history(SlurmCommands(runner=runner), tz=UTC, since="2026-01-01")
    assert (history.source, len(history.jobs)) == ("sacct", 6)
    assert runner.calls[0][:7] == ["sacct", "-P", "-n", "-X", "-D", "-S", "2026-01-01"]


def test_auto_falls_back_to_the_jobcomp_file() -> None:
    runner = Slurm({"sacct": NO_ACCOUNTING, "scontrol": config(DATA / "jobcomp.txt")})
    history = load_history(SlurmCommands(runner=runner))
    assert (history.source, history.location, len(history.jobs)) == (
        "jobcomp", str(DATA / "jobcomp.txt"), 11)
    assert [c[:3] for c in runner.calls][1] == ["scontrol", "show", "config"]


def test_auto_falls_back_to_squeue(tmp_path: Path) -> None:
    squeue = (0, (DATA / "squeue_all.json").read_text(), "")
    runner = Slurm({"sacct": NO_ACCOUNTING, "scontrol": config(tmp_path / "elsewhere.txt"),
                    "squeue": squeue})
    history = load_history(SlurmCommands(runner=runner))
    assert (history.source, len(history.jobs)) == ("squeue", 10)


def test_explicit_sources_fail_loudly(tmp_path: Path) -> None:
    runner = Slurm({"sacct": NO_ACCOUNTING, "scontrol": config(tmp_path / "missing.txt")})
    with pytest.raises(LaunchError, match="accounting storage is disabled"):
        load_history(SlurmCommands(runner=runner), source="sacct")
    with pytest.raises(ConfigError, match="no readable jobcomp file"):
        load_history(SlurmCommands(runner=runner), source="jobcomp")
    with pytest.raises(ConfigError, match="history source must be one of"):
        load_history(SlurmCommands(runner=runner), source="slurmdbd")


def test_jobcomp_path_asks_slurm_nothing(tmp_path: Path) -> None:
    runner = Slurm({})
    history = load_history(SlurmCommands(runner=runner), jobcomp=DATA / "jobcomp.txt")
    assert (history.source, len(history.jobs), runner.calls) == ("jobcomp", 11, [])
    with pytest.raises(ConfigError, match="cannot read jobcomp file"):
        load_history(SlurmCommands(runner=runner), jobcomp=tmp_path / "nope.txt")


def test_jobcomp_skips_lines_without_a_job_id() -> None:
    jobs = parse_jobcomp("\ngarbage line\nJobId=3 Name=x JobState=COMPLETED NodeList=n1\n"
                         "JobId=4 Name=trunc")
    assert [(j.job_id, j.state) for j in jobs] == [("3", "COMPLETED"), ("4", "UNKNOWN")]
