"""JobSpec / RetryPolicy validation: one clear ConfigError per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.errors import ConfigError
from trainguard.faultspec import parse_fault
from trainguard.recover.inject import FaultSchedule, xid_line
from trainguard.recover.spec import JobSpec, RetryPolicy


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"command": ("python", "t.py"), "nodes": ("n1", "n2"),
                               "nproc_per_node": 2, "run_dir": Path("r")}
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "match"), [
    ({"command": ()}, "no command"),
    ({"nodes": ()}, "--nodes is empty"),
    ({"nodes": ("n1", "n1")}, "listed twice"),
    ({"spares": ("n2",)}, "listed twice"),
    ({"nodes": ("bad name",)}, "invalid node name"),
    ({"nproc_per_node": 0}, "nproc-per-node"),
    ({"min_nodes": 3}, "min-nodes"),
    ({"hang_timeout_s": 0.0}, "hang_timeout_s"),
    ({"peer_exit_grace_s": -1.0}, "--peer-exit-grace"),
    ({"peer_exit_grace_s": float("nan")}, "--peer-exit-grace"),
    ({"master_port": 70000}, "master-port"),
    ({"faults": (parse_fault("xid:node=n9"),)}, "not in --nodes"),
])
def test_bad_specs(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        spec(**kw)


def test_kernel_log_without_node_only_when_each_host_reads_its_own(tmp_path: Path) -> None:
    """One path for every node is right when each host's agent reads its own
    /var/log/kern.log, and a mistake when this machine reads every node's log."""
    from trainguard.agent.backend import AgentBackend
    from trainguard.agent.launch_local import LocalLauncher
    from trainguard.recover.local import LocalBackend
    from trainguard.recover.supervisor import Supervisor

    s = spec(kernel_log="/var/log/kern.log", run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match=r"\{node\}"):
        Supervisor(s, LocalBackend()).prepare()
    agents = AgentBackend(LocalBackend(), LocalLauncher("ssh {node}"))
    Supervisor(s, agents).prepare()  # nothing is created at /var/log/kern.log here
    assert (tmp_path / "run" / "nodes" / "n1").is_dir()


def test_world_size_and_kernel_log_template() -> None:
    s = spec(kernel_log="{run_dir}/k/{node}.log")
    assert s.world_size == 4
    assert s.kernel_log_path("n2") == Path("r/k/n2.log")


@pytest.mark.parametrize("kw", [{"max_retries": -1}, {"backoff_s": -1.0},
                                {"implicated_limit": 0}, {"max_rollbacks": -1}])
def test_bad_policy(kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kw)  # type: ignore[arg-type]


def test_fault_schedule_by_step_and_time() -> None:
    faults = [parse_fault("kill:rank=3,step=5"), parse_fault("xid:node=n2,after=2"),
              parse_fault("hang:rank=1,attempt=1"), parse_fault("nan:step=3")]
    sched = FaultSchedule.for_attempt(faults, 0, ("n1", "n2"), 2, launched=100.0)
    assert [(f.spec.kind.value, f.rank, f.node) for f in sched.firings] == [
        ("kill", 3, "n2"), ("xid", None, "n2")]
    assert sched.due(101.0, {3: 4}) == []
    assert [f.spec.kind.value for f in sched.due(101.0, {3: 5})] == ["kill"]
    assert [f.spec.kind.value for f in sched.due(102.5, {3: 9})] == ["xid"]
    assert sched.due(200.0, {3: 99}) == []  # each fires once
    later = FaultSchedule.for_attempt(faults, 1, ("n1", "n2"), 2, launched=0.0)
    assert [(f.spec.kind.value, f.rank) for f in later.due(0.0, {})] == [("hang", 1)]


def test_xid_line_is_classified_as_that_xid() -> None:
    from trainguard.evidence import load_rules, scan_bytes

    events = scan_bytes(xid_line("n2", 79).encode(), load_rules(), path="k")
    assert [(e.xid, e.category.value, e.action.value) for e in events] == [
        (79, "gpu_hardware", "reboot_node")]
