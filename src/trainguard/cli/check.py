"""`trainguard check`: validate hosts through their agents (probes, clocks, links)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from trainguard.cli.console import EXIT_FAILED, err, fail, out
from trainguard.errors import ConfigError, TrainguardError

if TYPE_CHECKING:
    from trainguard.check.checker import CheckOptions, CheckReport
    from trainguard.check.floors import Floors

BackendOpt = Annotated[str, typer.Option(
    "--backend", help="How the agents are started: local (this machine, or each host through "
    "--agent-exec) or slurm (srun inside the allocation).")]
AgentExecOpt = Annotated[str | None, typer.Option(
    "--agent-exec", help="local: start each host's agent through this command template "
    "({node} is substituted), e.g. 'ssh {node}'.")]
ControllerOpt = Annotated[str | None, typer.Option(
    "--controller-addr", help="Address the agents dial to reach this process.")]
ListenOpt = Annotated[str | None, typer.Option(
    "--listen", help="Address to listen on for agents.")]
TimeLimitOpt = Annotated[float, typer.Option(
    "--time-limit", min=0.5, help="Seconds each probe may take on its host.")]
FloorsOpt = Annotated[Path | None, typer.Option(
    "--floors", help="TOML file with a [floors] table: figure name = minimum (maximum where "
    "lower is better), e.g. gemm_gflops = 50.")]
CheckpointDirOpt = Annotated[str | None, typer.Option(
    "--checkpoint-dir", help="Directory (as the hosts see it) the storage probe writes and "
    "reads a temporary file in; without it there is no storage probe.")]

Nodes = Annotated[str, typer.Option(
    "--nodes", help="Comma-separated hosts to check (at least 3 for comparisons between hosts; "
    "with fewer only the floors apply).")]


def check(
    nodes: Nodes,
    backend: BackendOpt = "local",
    agent_exec: AgentExecOpt = None,
    controller_addr: ControllerOpt = None,
    listen: ListenOpt = None,
    checkpoint_dir: CheckpointDirOpt = None,
    probe: Annotated[list[str] | None, typer.Option(
        "--probe", help="Run only these probes (repeat): cpu_gemm, mem_bandwidth, storage, "
        "gpu, gpu_perf, dcgm [default: all that apply].")] = None,
    links: Annotated[bool, typer.Option(
        "--links/--no-links", help="Measure the links between hosts and localize a slow "
        "host or link.")] = True,
    collective: Annotated[bool, typer.Option(
        "--collective/--no-collective", help="Last, a ring-wide all-reduce over the hosts "
        "that passed (gloo, NCCL with GPUs; needs torch on the hosts).")] = True,
    time_limit: TimeLimitOpt = 30.0,
    expected_gpus: Annotated[int | None, typer.Option(
        "--expected-gpus", min=0, help="GPUs each host should have (fewer fails).")] = None,
    floors: FloorsOpt = None,
    max_clock_offset: Annotated[float, typer.Option(
        "--max-clock-offset", min=0.0, help="Seconds a host's clock may differ from this "
        "machine's.")] = 1.0,
    connect_timeout: Annotated[float, typer.Option(
        "--connect-timeout", min=1.0, help="Seconds to wait for every agent to connect; "
        "hosts whose agent does not are reported unreachable.")] = 60.0,
    db: Annotated[str | None, typer.Option(
        "--db", help="Also record the results in this event store (SQLite path or "
        "postgresql:// URL; 'none': not recorded).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Validate hosts before (or after) they cost a job: compute, memory, storage, GPUs
    (NVML, GEMM, HBM and copy bandwidth, DCGM where installed), clock offset, and the links
    between hosts, each host compared with the others and with your floors.

    Each host's agent runs its probes, all hosts at once (hosts that share a machine one after
    another), each probe under --time-limit; a host that looks slow is measured again before it
    is named. Links are measured in rounds of disjoint pairs; a slow pair is re-paired with
    known-good hosts until the slow host, or the link itself, is named.

    Last, a ring-wide all-reduce over the hosts that passed confirms the whole set over the
    transport training uses (gloo; NCCL with GPUs).

    Exit status: 0 when every host passed (a probe that is not possible on a host is skipped
    with its reason, never a pass), 1 when a host is slow, failed or unreachable or the
    ring-wide all-reduce failed, 2 on bad input.
    """
    from trainguard.check.checker import CheckOptions
    from trainguard.check.probes import check_names

    try:
        hosts = host_list(nodes, "--nodes")
        if probe:
            check_names(probe)
        options = CheckOptions(
            probes=tuple(probe) if probe else None, checkpoint_dir=checkpoint_dir,
            time_limit_s=time_limit, expected_gpus=expected_gpus, links=links,
            collective=collective,
            max_clock_offset_s=max_clock_offset, floors=load_floors(floors))
    except ConfigError as exc:
        fail(str(exc), 2)
    report = run_host_check(hosts, options, AgentsAt(backend, agent_exec, controller_addr,
                                                     listen, connect_timeout), db, "check")
    if json_out:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        print_report(report)
    if not report.ok():
        raise typer.Exit(EXIT_FAILED)


@dataclass(frozen=True, slots=True)
class AgentsAt:
    """Where and how a check's agents are started (the CLI's --backend ... flags)."""

    backend: str = "local"
    agent_exec: str | None = None
    controller_addr: str | None = None
    listen: str | None = None
    connect_timeout_s: float = 60.0


def host_list(value: str, flag: str) -> tuple[str, ...]:
    hosts = tuple(n.strip() for n in value.split(",") if n.strip())
    if not hosts:
        raise ConfigError(f"{flag} has no host names")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"{flag} names a host twice")
    return hosts


def load_floors(path: Path | None) -> Floors:
    from trainguard.check.floors import Floors

    return Floors.load(path) if path is not None else Floors()


def progress(message: str) -> None:
    err.print(Text.assemble(("check: ", "bold cyan"), message))


def run_host_check(hosts: Sequence[str], options: CheckOptions, at: AgentsAt, db: str | None,
                   context: str) -> CheckReport:
    """Check ``hosts`` through agents started as ``at`` says; recorded in the store ``db``
    (when given) under ``context``. Bad input exits 2; the agents' logs are kept (and named)
    when a host is flagged."""
    from trainguard.agent.backend import with_agents
    from trainguard.recover.registry import BackendOptions, get_entry

    try:
        inner = get_entry(at.backend).factory(BackendOptions("trainguard-check", {}))
        agents = with_agents(inner, agent_exec=at.agent_exec, advertise=at.controller_addr,
                             listen=at.listen)
        agents.connect_timeout_s = at.connect_timeout_s
    except ConfigError as exc:
        fail(str(exc), 2)
    store = None
    if db is not None:
        from trainguard.cli.storeopen import open_store
        from trainguard.store import wants_no_store

        if not wants_no_store(db):  # --db none: nothing recorded
            store = open_store(db)
    work = Path(tempfile.mkdtemp(prefix="trainguard-check-"))
    try:
        report = agents.check_hosts(hosts, options, work, progress)
        if store is not None:
            store.add_host_checks(report, context=context)
    except TrainguardError as exc:
        fail(str(exc), 2)
    finally:
        agents.close()
        if store is not None:
            store.close()
    if not report.ok():
        progress(f"agents' logs kept in {work}/agents")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return report


def print_report(report: CheckReport) -> None:
    from trainguard.check.model import Level
    from trainguard.cli.tables import print_table

    table = Table(title=f"trainguard check: {len(report.hosts)} host(s) in "
                  f"{report.duration_s:.1f} s ({report.link_rounds} link round(s))")
    table.add_column("host")
    table.add_column("verdict")
    table.add_column("evidence")
    styles = {Level.PASS: "green", Level.SLOW: "yellow", Level.FAIL: "bold red",
              Level.SKIPPED: "dim"}
    for host in report.hosts:
        level = report.verdicts.get(host, Level.PASS)
        mine = [f for f in report.findings if host in f.hosts]
        bad = [f for f in mine if f.level in (Level.SLOW, Level.FAIL)]
        skipped = [f for f in mine if f.level is Level.SKIPPED]
        lines = [f.reason for f in bad] or ["all probes passed"]
        if skipped:
            lines.append("skipped: " + "; ".join(f"{f.check} ({f.reason})" for f in skipped))
        table.add_row(Text(host), Text(level.value, style=styles[level]),
                      Text("\n".join(lines)))
    print_table(out, table)
    cluster = [f for f in report.findings if f.subject == "cluster" and f.level is not Level.PASS]
    for f in cluster:
        err.print(Text(f"check: {f.reason}"))


__all__ = ["AgentsAt", "check", "host_list", "load_floors", "print_report", "run_host_check"]
