"""The launch plan and each rank's environment: a pure function of the spec and its inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.faultspec import parse_faults
from trainguard.recover.launchplan import PlanInputs, build_plan
from trainguard.recover.spec import JobSpec


def _spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"command": ("python", "train.py"), "nodes": ("a", "b"),
                               "spares": ("c",), "nproc_per_node": 2, "run_dir": Path("/r")}
    return JobSpec(**{**base, **kw})  # type: ignore[arg-type]


def _inputs(**kw: object) -> PlanInputs:
    base: dict[str, object] = {"index": 3, "nodes": ("b", "c"), "spares": ("a",),
                               "master_addr": "10.0.0.2", "master_port": 29400,
                               "run_id": "abc", "launch_time": 12.5, "workdir": Path("/w")}
    return PlanInputs(**{**base, **kw})  # type: ignore[arg-type]


def test_ranks_follow_the_node_order_of_the_attempt() -> None:
    plan = build_plan(_spec(), _inputs(), {})
    assert [(r.rank, r.node, r.local_rank, r.node_rank) for r in plan.ranks] == [
        (0, "b", 0, 0), (1, "b", 1, 0), (2, "c", 0, 1), (3, "c", 1, 1)]
    env = plan.ranks[3].env
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["GROUP_RANK"]) \
        == ("3", "4", "1", "1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.2", "29400")
    assert env["TORCHELASTIC_RESTART_COUNT"] == "3" and env["TORCHELASTIC_RUN_ID"] == "abc"
    assert env["TRAINGUARD_EVENTS"] == "/r/attempts/3/c/rank3.events.jsonl"
    assert float(env["TRAINGUARD_LAUNCH_TIME"]) == 12.5
    assert plan.ranks[3].output == Path("/r/attempts/3/c/rank3.log")
    assert (plan.attempt, plan.nodes, plan.workdir, plan.watch_nodes) \
        == (3, ("b", "c"), Path("/w"), ("a",))
    assert plan.kernel_logs == {n: f"/r/nodes/{n}/kern.log" for n in ("b", "c", "a")}


@pytest.mark.parametrize(("base", "nproc", "expected"), [
    ({}, 2, {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}),
    ({"PYTHONUNBUFFERED": "0", "OMP_NUM_THREADS": "8"}, 2, {}),
    ({}, 1, {"PYTHONUNBUFFERED": "1"}),
])
def test_defaults_only_where_the_environment_sets_nothing(
        base: dict[str, str], nproc: int, expected: dict[str, str]) -> None:
    env = build_plan(_spec(nproc_per_node=nproc), _inputs(), base).ranks[0].env
    assert {k: env[k] for k in ("PYTHONUNBUFFERED", "OMP_NUM_THREADS") if k in env} == expected


def test_sdk_faults_and_the_resume_limit_reach_the_ranks() -> None:
    spec = _spec(faults=parse_faults(["nan:step=5,attempt=3", "nan:step=9,attempt=1",
                                      "kill:rank=1"]))
    env = build_plan(spec, _inputs(resume_max_step=40), {}).ranks[0].env
    assert env["TRAINGUARD_INJECT"] == "nan:step=5,attempt=3"
    assert env["TRAINGUARD_RESUME_MAX_STEP"] == "40"
    plain = build_plan(_spec(), _inputs(), {}).ranks[0].env
    assert "TRAINGUARD_INJECT" not in plain and "TRAINGUARD_RESUME_MAX_STEP" not in plain
