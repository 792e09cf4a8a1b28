"""`trainguard run`: supervise a job (`trainguard inject`, faults into it: :mod:`.inject`)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.text import Text

from trainguard.agent.backend import with_agents
from trainguard.agent.manual import SECRET_FILE_NAME
from trainguard.check.probe_base import PROBE_TIMEOUT_S
from trainguard.cli.console import err, fail
from trainguard.cli.helptext import reflow
from trainguard.cli.options import duration_option
from trainguard.errors import ConfigError
from trainguard.faultspec import parse_faults
from trainguard.recover import JobSpec, RetryPolicy, RunResult, Supervisor
from trainguard.recover.backend import Closeable
from trainguard.recover.hostchecks import HostCheckConfig
from trainguard.recover.narrate import final_line
from trainguard.recover.registry import BackendOptions, backends_help, get_entry
from trainguard.recover.runlock import RunDirLock
from trainguard.recover.spec import job_name, parse_failure_domains, parse_snapshot_every
from trainguard.snapshot.layout import DEFAULT_ROOT
from trainguard.store import Store, wants_no_store

run_help = reflow("""Supervise a multi-node training job: every rank gets the torch.distributed
environment; failures are classified, culprit nodes excluded, and the job relaunched from its
last checkpoint. Put the command after `--`:

    trainguard run --nodes node1,node2,node3 --spares node4 --nproc-per-node 2
    --run-dir runs/gpt -- python examples/train_gpt.py --ckpt-dir runs/gpt/ckpt

The terminal shows a failure's culprit in full and folds the tracebacks of the ranks that failed
in consequence to one line each (--all-output shows everything); the per-rank logs in the run
dir keep every line.

Exit status: 0 when the job finally succeeded, 1 when the chain stopped, 2 on bad input (an
option, a run dir that cannot be written, a command not on PATH), 130 when cancelled (Ctrl-C).
""")


def _names(value: str, option: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if value.strip() and not names:
        raise ConfigError(f"{option} has no node names: {value!r}")
    return names


@contextlib.contextmanager
def _cancel_on_signals(sup: Supervisor) -> Iterator[None]:
    """Ctrl-C / SIGTERM / SIGHUP stop the ranks and record the attempt as cancelled."""

    def handler(signum: int, frame: FrameType | None) -> None:
        err.print(f"trainguard: {signal.Signals(signum).name}: stopping every rank")
        sup.cancel()

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run(
    command: Annotated[list[str] | None, typer.Argument(
        help="The training command, after `--`.", metavar="-- COMMAND [ARGS]...",
        show_default=False)] = None,
    nodes: Annotated[str, typer.Option(
        "--nodes", help="Comma-separated nodes of the first launch, in rank order.")] = "",
    spares: Annotated[str, typer.Option(
        "--spares", help="Comma-separated spare nodes that replace excluded ones.")] = "",
    nproc_per_node: Annotated[int, typer.Option(
        "--nproc-per-node", help="Ranks (processes) per node.")] = 1,
    run_dir: Annotated[Path, typer.Option(
        "--run-dir", help="Rank output, SDK events, node directories (nodes/<node>/kern.log) "
        "and summary.json.")] = Path("trainguard-run"),
    backend: Annotated[str, typer.Option(
        "--backend", help=backends_help())] = "local",
    slurm_mode: Annotated[str | None, typer.Option(
        "--slurm-mode", help="slurm: `allocation` (srun steps inside salloc/sbatch; the "
        "default when SLURM_JOB_ID is set) or `submit` (one sbatch job per attempt).")] = None,
    partition: Annotated[str | None, typer.Option(
        "--partition", help="slurm submit: partition for the jobs.")] = None,
    time_limit: Annotated[str | None, typer.Option(
        "--time-limit", help="slurm submit: --time for the jobs (e.g. 1:00:00).")] = None,
    min_nodes: Annotated[int | None, typer.Option(
        "--min-nodes", help="Let the job shrink to this many nodes when spares run out "
        "(default: never shrink).")] = None,
    hang_timeout: Annotated[float, duration_option(
        "--hang-timeout", help="Seconds without progress (SDK heartbeat, else output) that "
        "mean a hang.")] = 300.0,
    startup_timeout: Annotated[float, duration_option(
        "--startup-timeout", help="Seconds allowed before a rank's first progress.")] = 900.0,
    term_timeout: Annotated[float, duration_option(
        "--term-timeout", help="Seconds between SIGTERM and SIGKILL when stopping ranks.")
    ] = 10.0,
    exit_grace: Annotated[float, duration_option(
        "--exit-grace", help="Seconds a rank that reported finish() (SDK) may take to exit "
        "before it is stopped and counted as done (teardown hangs).")] = 30.0,
    peer_exit_grace: Annotated[float, duration_option(
        "--peer-exit-grace", help="Seconds the other ranks may take to exit on their own after "
        "a rank aborts or crashes (SIGABRT, SIGSEGV...), before they are stopped: tells a crash "
        "in teardown from one mid-training.")] = 5.0,
    max_retries: Annotated[int, typer.Option(
        "--max-retries", help="Relaunches allowed in the chain.")] = 5,
    crash_loop_restarts: Annotated[int, typer.Option(
        "--crash-loop-restarts", help="Stop the chain as a crash loop when this many restarts "
        "in a row got no further than the best step reached before them (SDK steps; 0: "
        "off).")] = 3,
    backoff: Annotated[float, duration_option(
        "--backoff", help="Seconds before the second relaunch of a run of failures (the first "
        "is immediate); doubles per further failure. An attempt that trained past every "
        "earlier one (SDK steps) starts a new run.")
    ] = 1.0,
    backoff_max: Annotated[float, duration_option("--backoff-max", help="Cap on the backoff.")
                           ] = 60.0,
    kernel_log: Annotated[str | None, typer.Option(
        "--kernel-log", help="Watched kernel log per node; {node} and {run_dir} are "
        "substituted. Default: {run_dir}/nodes/{node}/kern.log.")] = None,
    alerts: Annotated[Path | None, typer.Option(
        "--alerts", help="Follow this JSON-lines file of detector alerts "
        "(`trainguard detect --out`, `trainguard backtest --alerts-out`, or `trainguard watch`'s "
        "--supervisor-alerts).")] = None,
    alerts_replay: Annotated[Path | None, typer.Option(
        "--alerts-replay", help="--inject alert:node=X replays X's first alert from this "
        "detector alerts file (demos, fire drills).")] = None,
    stop_on_predictive: Annotated[bool, typer.Option(
        "--stop-on-predictive", help="Also stop an attempt on predictive detector alerts "
        "(hard alerts always stop it).")] = False,
    db: Annotated[str | None, typer.Option(
        "--db", help="Event store: SQLite path or postgresql:// URL "
        "(default $TRAINGUARD_DB, else ./trainguard.db); 'none' for no store, as --no-db.")
    ] = None,
    no_db: Annotated[bool, typer.Option("--no-db", help="Do not write the event store.")
                     ] = False,
    inject: Annotated[list[str] | None, typer.Option(
        "--inject", help="Inject a fault (repeatable), e.g. kill:rank=1,step=20 or "
        "xid:node=node2,xid=79,after=10. See `trainguard inject --help`.")] = None,
    slots_per_node: Annotated[int | None, typer.Option(
        "--slots-per-node", help="local: ranks a virtual node holds (default: CPU count).",
        min=1)] = None,
    master_port: Annotated[int | None, typer.Option(
        "--master-port", help="Rendezvous port (default: a free port per launch).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="The run's name in the store and the report [default: the script's "
        "name, e.g. train_gpt for python train_gpt.py].")
                    ] = None,
    preflight: Annotated[bool, typer.Option(
        "--preflight", help="Check the nodes and spares before the first launch (`trainguard "
        "check` through the agents): a node judged slow or failed is replaced by a spare that "
        "passed; too few good hosts: the run stops before launching, naming them.")] = False,
    stop_checks: Annotated[bool, typer.Option(
        "--stop-checks", help="After a failure that names no single culprit (a hang, a "
        "collective timeout, a network error, a lost host), check the next attempt's nodes and "
        "the spares before relaunching, and exclude what fails.")] = False,
    check_floors: Annotated[Path | None, typer.Option(
        "--check-floors", help="TOML [floors] for --preflight/--stop-checks (see `trainguard "
        "check --floors`).")] = None,
    check_time_limit: Annotated[float, duration_option(
        "--check-time-limit", min=0.5, help="Seconds each probe of --preflight/--stop-checks "
        "may take on its host (as `trainguard check --probe-timeout`).")] = PROBE_TIMEOUT_S,
    all_output: Annotated[bool, typer.Option(
        "--all-output", help="Echo every line of the ranks' output. By default the tracebacks "
        "that follow a failure (peers reacting to the failed rank) are counted in one line per "
        "rank; the per-rank logs keep every line either way.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not echo rank output.")
                     ] = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print summary.json to stdout at the end (rank output goes to stderr).")
    ] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Reuse a run dir that holds an earlier run (its attempts/ and "
        "summary.json are removed; nodes/ is kept).")] = False,
    agents: Annotated[bool, typer.Option(
        "--agents/--no-agents", help="Run each node's ranks through a per-host `trainguard "
        "agent` that reports over the network (the default; what multi-host runs need). "
        "--no-agents: this process starts the ranks itself (one shared host).")] = True,
    agent_exec: Annotated[str | None, typer.Option(
        "--agent-exec", help="local: start each node's agent through this command template "
        "({node} is substituted), e.g. 'ssh {node}'; the nodes are then separate hosts. "
        "`manual`: print each host's `trainguard agent` command line (this run's address, "
        "port and session; the secret in RUN_DIR/agent-secret) whenever agents are needed, and "
        "wait for them to be started by hand.")
    ] = None,
    controller_addr: Annotated[str | None, typer.Option(
        "--controller-addr", help="Address the agents dial to reach this controller "
        "[default: 127.0.0.1 for virtual nodes, else this host's name].")] = None,
    listen: Annotated[str | None, typer.Option(
        "--listen", help="Address to listen on for agents [default: --controller-addr's; "
        "all interfaces for remote hosts].")] = None,
    snapshot_root: Annotated[Path, typer.Option(
        "--snapshot-root", help="Where each host keeps the run's in-memory snapshots (a tmpfs; "
        "removed when the run ends).")] = DEFAULT_ROOT,
    snapshot_every: Annotated[str, typer.Option(
        "--snapshot-every", help="Steps between in-memory snapshots of scripts that call "
        "Checkpoints.snapshot: `auto` (as often as costs at most 2% of the step time), an "
        "integer K, or `off` (restores read the disk checkpoint).")] = "auto",
    failure_domains: Annotated[str | None, typer.Option(
        "--failure-domains", help="Failure domain of each node, as FILE (JSON object or "
        "`node=domain` lines) or node1=rackA,node2=rackB: a node's snapshots are replicated "
        "to a host in another domain.")] = None,
    warm: Annotated[bool, typer.Option(
        "--warm/--no-warm", help="Keep pre-warmed standby interpreters (torch, the "
        "script's imports and what its ranks loaded) on every node and spare, so a relaunch "
        "skips interpreter start and imports. Off by default: each standby holds those "
        "modules in memory and uses CPU while it imports.")] = False,
    node_timeout: Annotated[float, duration_option(
        "--node-timeout", help="Seconds a host's agent may be silent before the host counts "
        "as lost (handled like Slurm's NODE_FAIL: excluded, resumed on a spare); an agent "
        "that misses the controller for 10 s less (at least half) kills its ranks (fencing).",
        min=1.0)
    ] = 30.0,
) -> None:
    try:
        entry = get_entry(backend)
        node_names = _names(nodes, "--nodes")
        spare_names = _names(spares, "--spares")
        if not node_names and entry.default_nodes is not None:
            node_names = entry.default_nodes(spare_names)
        faults = parse_faults(inject or ())
        domains = parse_failure_domains(failure_domains) if failure_domains else None
        spec = JobSpec(
            command=tuple(command or ()), nodes=node_names, spares=spare_names,
            nproc_per_node=nproc_per_node, run_dir=run_dir.absolute(), min_nodes=min_nodes,
            name=name or job_name(command or ()), hang_timeout_s=hang_timeout,
            startup_timeout_s=startup_timeout, term_timeout_s=term_timeout,
            exit_grace_s=exit_grace, peer_exit_grace_s=peer_exit_grace,
            kernel_log=kernel_log or "{run_dir}/nodes/{node}/kern.log",
            alerts_file=alerts.absolute() if alerts else None,
            alerts_replay=alerts_replay.absolute() if alerts_replay else None,
            stop_on_predictive=stop_on_predictive, master_port=master_port, faults=faults,
            policy=RetryPolicy(max_retries=max_retries, backoff_s=backoff,
                               backoff_max_s=backoff_max,
                               crash_loop_restarts=crash_loop_restarts),
            snapshot_root=snapshot_root.absolute(),
            snapshot_every=parse_snapshot_every(snapshot_every), failure_domains=domains,
            warm=warm)
    except ConfigError as exc:
        fail(str(exc), code=2)
    lock = RunDirLock(spec.run_dir)  # one supervisor per run dir, held until this process ends
    try:
        lock.acquire()
    except ConfigError as exc:
        fail(str(exc), code=2)
    store = None if no_db or wants_no_store(db) else Store.open(db)
    echo_to = sys.stderr if json_out else sys.stdout

    def on_output(rank: int, node: str, line: str) -> None:
        if not quiet:
            echo_to.write(f"[{node} r{rank}] {line}\n")
            echo_to.flush()

    def on_status(message: str) -> None:
        err.print(Text.assemble(("trainguard: ", "bold cyan"), message))

    try:
        launcher = entry.factory(BackendOptions(spec.name, {
            "slots_per_node": slots_per_node, "slurm_mode": slurm_mode,
            "partition": partition, "time_limit": time_limit}))
        if agents:
            launcher = with_agents(launcher, agent_exec=agent_exec, advertise=controller_addr,
                                   listen=listen, node_timeout_s=node_timeout,
                                   secret_file=spec.run_dir / SECRET_FILE_NAME)
        elif agent_exec is not None:
            raise ConfigError("--agent-exec needs agents (drop --no-agents)")
    except ConfigError as exc:
        fail(str(exc), code=2)
    try:
        checks = _host_checks(preflight, stop_checks, check_floors, check_time_limit)
    except ConfigError as exc:
        fail(str(exc), code=2)
    from trainguard.fdlimit import raise_nofile_limit

    raise_nofile_limit()  # the controller holds a connection per agent and files per rank
    sup = Supervisor(spec, launcher, store=store, on_status=on_status, on_output=on_output,
                     overwrite=overwrite, echo_all=all_output, host_checks=checks)
    try:
        with _cancel_on_signals(sup):
            try:
                result = sup.run()
            except ConfigError as exc:
                fail(str(exc), code=2)
    finally:
        if isinstance(launcher, Closeable):
            launcher.close()
        sup.sweep_snapshots()
        if store is not None:
            store.close()
        lock.release()
    _report(result, json_out)
    raise typer.Exit(result.exit_code)


def _host_checks(preflight: bool, stop_checks: bool, floors: Path | None,
                 time_limit_s: float) -> HostCheckConfig | None:
    if not (preflight or stop_checks):
        if floors is not None:
            raise ConfigError("--check-floors needs --preflight or --stop-checks")
        return None
    from trainguard.check.checker import CheckOptions
    from trainguard.check.floors import Floors

    options = CheckOptions(time_limit_s=time_limit_s,
                           floors=Floors.load(floors) if floors is not None else Floors())
    return HostCheckConfig(preflight=preflight, stop_time=stop_checks, options=options)


def _report(result: RunResult, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(Path(result.run_dir / "summary.json").read_text())
    for attempt in result.attempts[1:]:
        restore = attempt.restore or {}
        if restore:
            err.print(Text.assemble(("trainguard: ", "bold cyan"), recovery_line(
                attempt.index, restore)))
    line = final_line(result, result.run_dir / "summary.json")
    style = "bold green" if result.status == "succeeded" else "bold red"
    err.print(Text.assemble(("trainguard: ", "bold cyan"), (line, style)))


_FROM = {"memory": "from memory", "buddy": "from a buddy's memory",
         "mixed": "from memory (own hosts and buddies)", "disk": "from disk",
         "none": "from scratch (no checkpoint)"}


def recovery_line(index: int, restore: Mapping[str, Any]) -> str:
    """``attempt 1 restored step 25 from memory (3 steps lost)``."""
    source, step, lost = restore.get("source"), restore.get("step"), restore.get("steps_lost")
    if source == "unknown":
        return (f"attempt {index} resumed as the script chose (it reports no resume to "
                "trainguard: no SDK)")
    where = _FROM.get(str(source), f"from {source}")
    what = f"step {step} {where}" if step is not None else where
    text = f"attempt {index} restored {what}"
    if lost is not None:
        text += f" ({lost} step{'s' if lost != 1 else ''} lost)"
    if source == "disk" and restore.get("why"):
        text += f": {restore['why']}"
    return text


__all__ = ["recovery_line", "run", "run_help"]
