"""`trainguard check`: validate hosts through their agents (probes, clocks, links)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from trainguard.cli.console import EXIT_FAILED, err, fail, out
from trainguard.errors import ConfigError, TrainguardError

Nodes = Annotated[str, typer.Option(
    "--nodes", help="Comma-separated hosts to check (at least 3 for comparisons between hosts; "
    "with fewer only the floors apply).")]


def check(
    nodes: Nodes,
    backend: Annotated[str, typer.Option(
        "--backend", help="How the agents are started: local (this machine, or each host "
        "through --agent-exec) or slurm (srun inside the allocation).")] = "local",
    agent_exec: Annotated[str | None, typer.Option(
        "--agent-exec", help="local: start each host's agent through this command template "
        "({node} is substituted), e.g. 'ssh {node}'.")] = None,
    controller_addr: Annotated[str | None, typer.Option(
        "--controller-addr", help="Address the agents dial to reach this process.")] = None,
    listen: Annotated[str | None, typer.Option(
        "--listen", help="Address to listen on for agents.")] = None,
    checkpoint_dir: Annotated[str | None, typer.Option(
        "--checkpoint-dir", help="Directory (as the hosts see it) the storage probe writes and "
        "reads a temporary file in; without it there is no storage probe.")] = None,
    probe: Annotated[list[str] | None, typer.Option(
        "--probe", help="Run only these probes (repeat): cpu_gemm, mem_bandwidth, storage, "
        "gpu, gpu_perf, dcgm [default: all that apply].")] = None,
    links: Annotated[bool, typer.Option(
        "--links/--no-links", help="Measure the links between hosts and localize a slow "
        "host or link.")] = True,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", min=0.5, help="Seconds each probe may take on its host.")] = 30.0,
    expected_gpus: Annotated[int | None, typer.Option(
        "--expected-gpus", min=0, help="GPUs each host should have (fewer fails).")] = None,
    floors: Annotated[Path | None, typer.Option(
        "--floors", help="TOML file with a [floors] table: figure name = minimum (maximum "
        "where lower is better), e.g. gemm_gflops = 50.")] = None,
    max_clock_offset: Annotated[float, typer.Option(
        "--max-clock-offset", min=0.0, help="Seconds a host's clock may differ from this "
        "machine's.")] = 1.0,
    connect_timeout: Annotated[float, typer.Option(
        "--connect-timeout", min=1.0, help="Seconds to wait for every agent to connect; "
        "hosts whose agent does not are reported unreachable.")] = 60.0,
    db: Annotated[str | None, typer.Option(
        "--db", help="Also record the results in this event store (SQLite path or "
        "postgresql:// URL).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Validate hosts before (or after) they cost a job: compute, memory, storage, GPUs
    (NVML, GEMM, HBM and copy bandwidth, DCGM where installed), clock offset, and the links
    between hosts, each host compared with the others and with your floors.

    Each host's agent runs its probes, all hosts at once, each probe under --time-limit. Links
    are measured in rounds of disjoint pairs; a slow pair is re-paired with known-good hosts
    until the slow host, or the link itself, is named.

    Exit status: 0 when every host passed (a probe that is not possible on a host is skipped
    with its reason, never a pass), 1 when a host is slow, failed or unreachable, 2 on bad
    input.
    """
    from trainguard.agent.backend import AgentBackend, with_agents
    from trainguard.check.checker import CheckOptions
    from trainguard.check.floors import Floors
    from trainguard.check.probes import check_names
    from trainguard.recover.registry import BackendOptions, get_entry

    try:
        hosts = tuple(n.strip() for n in nodes.split(",") if n.strip())
        if not hosts:
            raise ConfigError("--nodes has no host names")
        if len(set(hosts)) != len(hosts):
            raise ConfigError("--nodes names a host twice")
        if probe:
            check_names(probe)
        options = CheckOptions(
            probes=tuple(probe) if probe else None, checkpoint_dir=checkpoint_dir,
            time_limit_s=time_limit, expected_gpus=expected_gpus, links=links,
            max_clock_offset_s=max_clock_offset,
            floors=Floors.load(floors) if floors is not None else Floors())
        entry = get_entry(backend)
        inner = entry.factory(BackendOptions("trainguard-check", {}))
        agents_backend: AgentBackend = with_agents(inner, agent_exec=agent_exec,
                                                   advertise=controller_addr, listen=listen)
    except ConfigError as exc:
        fail(str(exc), 2)
    store = None
    if db is not None:
        from trainguard.cli.storeopen import open_store

        store = open_store(db)
    work = Path(tempfile.mkdtemp(prefix="trainguard-check-"))

    def progress(message: str) -> None:
        err.print(Text.assemble(("check: ", "bold cyan"), message))

    try:
        report = agents_backend.check_hosts(hosts, options, work, progress)
        if store is not None:
            store.add_host_checks(report)
    except TrainguardError as exc:
        fail(str(exc), 2)
    finally:
        agents_backend.close()
        if store is not None:
            store.close()
    if report.flagged():
        progress(f"agents' logs kept in {work}/agents")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if json_out:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        _print_report(report)
    if report.flagged():
        raise typer.Exit(EXIT_FAILED)


def _print_report(report: object) -> None:
    from trainguard.check.checker import CheckReport
    from trainguard.check.model import Level
    from trainguard.cli.tables import print_table

    assert isinstance(report, CheckReport)
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
    cluster = [f for f in report.findings if f.subject == "cluster"]
    for f in cluster:
        err.print(Text(f"check: {f.reason}"))


__all__ = ["check"]
