"""`trainguard check`: validate hosts through their agents (probes, clocks, links)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from trainguard.check.hostnames import parse_hosts
from trainguard.check.judge import MIN_PEERS
from trainguard.check.probe_base import PROBE_TIMEOUT_S
from trainguard.cli.console import EXIT_FAILED, err, fail, out, warn
from trainguard.cli.options import duration_option
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
ProbeTimeoutOpt = Annotated[float | None, duration_option(
    "--probe-timeout", min=0.5, show_default=False,
    help=f"Seconds each probe may take on its host [default: {PROBE_TIMEOUT_S:g}s].")]
OldTimeLimitOpt = Annotated[float | None, duration_option(
    "--time-limit", min=0.5, hidden=True,
    help="Deprecated name of --probe-timeout (not a Slurm time limit, unlike run's).")]
FloorsOpt = Annotated[Path | None, typer.Option(
    "--floors", help="TOML file with a [floors] table: figure name = minimum (maximum where "
    "lower is better), e.g. gemm_gflops = 50.")]
CheckpointDirOpt = Annotated[str | None, typer.Option(
    "--checkpoint-dir", help="Directory (as the hosts see it) the storage probe writes and "
    "reads a temporary file in; without it there is no storage probe.")]

Nodes = Annotated[str, typer.Option(
    "--nodes", help=f"Comma-separated host names (RFC 1123, '_' allowed) to check. Probe "
    f"figures are compared between hosts from {MIN_PEERS + 1} hosts on, links from 3; with "
    "fewer only the floors apply.")]


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
    probe_timeout: ProbeTimeoutOpt = None,
    time_limit: OldTimeLimitOpt = None,
    ring_timeout: Annotated[float | None, duration_option(
        "--ring-timeout", min=1.0, show_default=False,
        help="Seconds the ring-wide all-reduce may take, and each round of subset rings "
        # ringrun's RING_TIMEOUT_S and SUBSET_TIMEOUT_S in words: importing it here would
        # cost every `check` and `nodes` start-up ~0.17 s for a help string (a test compares).
        "that localizes a failed one [default: 60s for the ring, or --connect-timeout if "
        "longer; 45s a round].")] = None,
    expected_gpus: Annotated[int | None, typer.Option(
        "--expected-gpus", min=0, help="GPUs each host should have (fewer fails).")] = None,
    floors: FloorsOpt = None,
    max_clock_offset: Annotated[float, duration_option(
        "--max-clock-offset", min=0.0, help="Seconds a host's clock may differ from this "
        "machine's.")] = 1.0,
    connect_timeout: Annotated[float, duration_option(
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
    another), each probe under --probe-timeout; a host that looks slow is measured again
    before it is named. Links are measured in rounds of disjoint pairs; a slow pair is
    re-paired with known-good hosts until the slow host, or the link itself, is named.

    Last, a ring-wide all-reduce over the hosts that passed confirms the whole set over the
    transport training uses (gloo; NCCL with GPUs).

    Hosts that already failed a probe are left out of the link rounds (reported as not
    link-tested). A link round repeats a pair only to confirm a slow result, and says so.

    With --backend slurm, run it inside an allocation (salloc or an sbatch script): the
    agents start as a step of it; check never submits a job.

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
            time_limit_s=probe_timeout_s(probe_timeout, time_limit),
            expected_gpus=expected_gpus, links=links, collective=collective,
            ring_timeout_s=ring_timeout, max_clock_offset_s=max_clock_offset,
            floors=load_floors(floors))
    except ConfigError as exc:
        fail(str(exc), 2)
    report = run_host_check(hosts, options, AgentsAt(backend, agent_exec, controller_addr,
                                                     listen, connect_timeout), db, "check")
    if json_out:
        from trainguard.check.summary import notes, summary_line

        doc = {**report.to_dict(), "notes": notes(report), "summary": summary_line(report)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
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
    """The hosts of a comma-separated list, validated
    (:func:`trainguard.check.hostnames.parse_hosts`)."""
    return parse_hosts(value, flag)


def probe_timeout_s(value: float | None, old: float | None) -> float:
    """The probe time limit from --probe-timeout or its deprecated name --time-limit (with a
    warning); both at once is a ConfigError. Neither: :data:`PROBE_TIMEOUT_S`."""
    if old is not None:
        if value is not None:
            raise ConfigError("--time-limit is the old name of --probe-timeout: give one")
        warn("--time-limit is deprecated here: use --probe-timeout (seconds per probe)")
        return old
    return PROBE_TIMEOUT_S if value is None else value


def allocation_problem(backend: str, env: Mapping[str, str]) -> str | None:
    """Why a check cannot start its agents through ``backend`` here, or None. Slurm: only as
    a step of the allocation it runs in (a check never submits a job of its own)."""
    if backend == "slurm" and not env.get("SLURM_JOB_ID"):
        return ("--backend slurm needs a Slurm allocation (SLURM_JOB_ID is not set): run "
                "inside an allocation (salloc -N <hosts> trainguard check ...) or an sbatch "
                "script; a check does not submit jobs")
    return None


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

    if (problem := allocation_problem(at.backend, os.environ)) is not None:
        fail(problem, 2)
    # inside the allocation: its steps, never sbatch
    mode: dict[str, str | int | None] = {"slurm_mode": "allocation"} \
        if at.backend == "slurm" else {}
    try:
        inner = get_entry(at.backend).factory(BackendOptions("trainguard-check", mode))
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
    """The report on the terminal: per host its verdict, its measured figures (each with its
    floor and verdict) and link rates, and the evidence; below, the whole set's results (the
    all-reduce), the notes (figures judged by floors only) and the summary line."""
    from trainguard.check.model import Level
    from trainguard.check.summary import (
        evidence_lines,
        figure_lines,
        link_line,
        notes,
        summary_line,
    )
    from trainguard.cli.tables import print_table

    table = Table(title=f"trainguard check: {len(report.hosts)} host(s) in "
                  f"{report.duration_s:.1f} s ({report.link_rounds} link round(s))")
    table.add_column("host")
    table.add_column("verdict")
    table.add_column("measured")
    table.add_column("evidence")
    styles = {Level.PASS: "green", Level.SLOW: "yellow", Level.FAIL: "bold red",
              Level.SKIPPED: "dim"}
    for host in report.hosts:
        level = report.verdicts.get(host, Level.PASS)
        measured = figure_lines(report, host)
        links = link_line(report, host)
        if links is not None:
            measured.append(links)
        table.add_row(Text(host), Text(level.value, style=styles[level]),
                      Text("\n".join(measured) or "-"),
                      Text("\n".join(evidence_lines(report, host))))
    print_table(out, table)
    for f in report.findings:
        if f.kind == "cluster":
            out.print(Text.assemble((f"{f.check} {f.level.value}: ", styles[f.level]),
                                    f.reason))
    for note in notes(report):
        out.print(Text(note))
    ok = report.ok()
    out.print(Text.assemble(("check: ", "bold cyan"),
                            (summary_line(report), "green" if ok else "bold red")))


__all__ = ["AgentsAt", "OldTimeLimitOpt", "ProbeTimeoutOpt", "allocation_problem", "check",
           "host_list", "load_floors", "print_report", "probe_timeout_s", "run_host_check"]
