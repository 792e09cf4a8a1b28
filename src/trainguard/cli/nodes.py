"""`trainguard nodes`: the fleet's health memory; exclude and release nodes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trainguard.cli.check import (
    AgentExecOpt,
    AgentsAt,
    BackendOpt,
    CheckpointDirOpt,
    ControllerOpt,
    FloorsOpt,
    ListenOpt,
    OldTimeLimitOpt,
    ProbeTimeoutOpt,
    host_list,
    load_floors,
    probe_timeout_s,
    run_host_check,
)
from trainguard.cli.console import err, fail, out, warn
from trainguard.cli.storeopen import open_store
from trainguard.durations import format_duration
from trainguard.errors import ConfigError, TrainguardError
from trainguard.nodehealth import exclusion_concentration, node_health
from trainguard.store import HostCheckRecord, Store

if TYPE_CHECKING:
    from trainguard.check.checker import CheckOptions

app = typer.Typer(
    help="Node-health memory: exclusions, XIDs, alerts, jobs taken down (hardware evidence), "
    "suspicions (a failure's evidence pointed at the node), lemon scores. Without a "
    "sub-command: list the nodes.",
    invoke_without_command=True)

DbOpt = Annotated[str | None, typer.Option(
    "--db", help="Event store: SQLite path or postgresql:// URL "
    "(default $TRAINGUARD_DB, else ./trainguard.db).")]


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


_LEVEL_STYLE = {"pass": "green", "slow": "yellow", "fail": "bold red", "skipped": "dim"}


def check_cell(check: HostCheckRecord | None, now: float) -> str:
    """A host's last check for the table: ``slow 2.0 h ago: gemm 12.1 GFLOP/s, 0.21x...``."""
    if check is None:
        return "-"
    style = _LEVEL_STYLE.get(check.level, "")
    level = escape(check.level)
    text = f"[{style}]{level}[/{style}]" if style else level
    text += f" {format_duration(max(0.0, now - check.checked_at))} ago"
    if check.level != "pass" and check.reason:
        reason = check.reason if len(check.reason) <= 80 else check.reason[:79] + "…"
        text += f": {escape(reason)}"
    return text


def check_dict(check: HostCheckRecord | None, now: float) -> dict[str, object] | None:
    """A host's last check for ``--json`` (None when it was never checked)."""
    if check is None:
        return None
    return {"level": check.level, "checked_at": check.checked_at,
            "age_s": round(max(0.0, now - check.checked_at), 3),
            "duration_s": check.duration_s, "reason": check.reason, "context": check.context,
            "session_id": check.session_id}


@app.callback()
def nodes(
    ctx: typer.Context,
    db: DbOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """List nodes, worst lemon score first: state, exclusions, XIDs, alerts, last evidence,
    last host check."""
    if ctx.invoked_subcommand is not None:
        return
    now = time.time()
    try:
        with open_store(db, readonly=True) as store:
            checks = store.last_host_checks()
            health = node_health(store, now=now, extra_nodes=checks)
            conc = exclusion_concentration(store)
    except TrainguardError as exc:
        fail(str(exc), 1)
    if json_out:
        out.print_json(json.dumps({
            "nodes": [{**h.to_dict(), "last_check": check_dict(checks.get(h.node), now)}
                      for h in health],
            "exclusion_concentration": conc.to_dict()}))
        return
    if not health:
        err.print("no nodes in the store yet")
        return
    table = Table(title="nodes (worst first)")
    for col in ("node", "state", "exclusions", "XIDs", "alerts", "jobs down", "suspected",
                "lemon score", "last evidence", "last check"):
        table.add_column(col)
    for h in health:
        state = (f"[red]excluded[/red] since {_when(h.excluded_since)}: "
                 f"{escape(h.exclusion_reason or '')}" if h.excluded
                 else escape(h.listed_state))
        lemon = f"[bold red]{h.lemon_score:.2f} lemon[/bold red]" if h.lemon \
            else f"{h.lemon_score:.2f}"
        evidence = f"{_when(h.last_evidence_time)} {h.last_evidence}" if h.last_evidence else "-"
        table.add_row(h.node, state, str(h.exclusions), str(h.xids), str(h.alerts),
                      str(h.jobs_taken_down), str(h.suspicions), lemon, evidence[:80],
                      check_cell(checks.get(h.node), now))
    out.print(table)
    if conc.total:
        out.print(f"exclusions: {conc.total} over {conc.nodes} node(s); top {conc.top_k} "
                  f"share {conc.top_k_share:.0%}, Gini {conc.gini:.2f}")


SlurmOpt = Annotated[bool, typer.Option(
    "--slurm", help="Also tell Slurm (scontrol update: drain with the reason / resume).")]


def _slurm(action: str, node: str, reason: str = "") -> None:
    from trainguard.recover.slurm.commands import SlurmCommands
    from trainguard.recover.slurm.safety import validate_node_name

    commands = SlurmCommands()
    validate_node_name(node)
    if action == "drain":
        commands.drain(node, f"trainguard: {reason}")
    else:
        commands.resume(node)


@app.command("exclude")
def exclude(
    node: Annotated[str, typer.Argument(help="Node name.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the exclusion).")],
    db: DbOpt = None,
    slurm: SlurmOpt = False,
) -> None:
    """Exclude a node: no trainguard run uses it until `trainguard nodes release`."""
    if not node.strip() or not reason.strip():
        fail("node and --reason must not be empty", code=2)
    # The store first: a mistyped --db must fail before Slurm is told anything.
    with open_store(db) as store:
        try:
            if slurm:
                _slurm("drain", node, reason)
            store.add_exclusion(node, reason=reason, created=time.time(), source="operator")
            store.upsert_node(node, state="excluded", seen=time.time())
        except ConfigError as exc:  # a node name Slurm would not take
            fail(str(exc), 2)
        except TrainguardError as exc:
            fail(str(exc), 1)
    err.print(f"{node} excluded: {reason}")


@app.command("release")
def release(
    node: Annotated[str, typer.Argument(help="Node name.")],
    db: DbOpt = None,
    slurm: SlurmOpt = False,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Re-admit the node only when `trainguard check` passes it (run "
        "through agents, as `trainguard check`); the result is recorded in the store.")] = False,
    peers: Annotated[str | None, typer.Option(
        "--peers", help="With --verify: healthy hosts to compare the node with and to measure "
        "its links against (without them only the floors and hard failures apply).")] = None,
    backend: BackendOpt = "local",
    agent_exec: AgentExecOpt = None,
    controller_addr: ControllerOpt = None,
    listen: ListenOpt = None,
    checkpoint_dir: CheckpointDirOpt = None,
    probe_timeout: ProbeTimeoutOpt = None,
    time_limit: OldTimeLimitOpt = None,
    floors: FloorsOpt = None,
) -> None:
    """Release a node after repair: later runs may use it again. With --verify, only when its
    checks pass (exit 1 and the reasons otherwise).

    A node without an active exclusion is refused (exit 2) before anything runs, unless
    --slurm (Slurm may have drained a node the store never excluded)."""
    if peers is not None and not verify:
        fail("--peers needs --verify", 2)
    try:  # every input first: nothing runs for a node that cannot be released
        checking = _verify_input(node, peers, checkpoint_dir,
                                 probe_timeout_s(probe_timeout, time_limit), floors) \
            if verify else None
    except ConfigError as exc:
        fail(str(exc), 2)
    with open_store(db) as store:
        try:
            problem = release_problem(store, node) if not slurm else None
        except TrainguardError as exc:
            fail(str(exc), 1)
    if problem is not None:
        fail(problem, 2)
    if checking is not None:
        _verify(node, *checking, AgentsAt(backend, agent_exec, controller_addr, listen), db)
    with open_store(db) as store:
        try:
            if slurm:
                _slurm("resume", node)
            n = store.release_exclusion(node, released=time.time())
            if n:
                store.upsert_node(node, state="ok", seen=time.time())
        except ConfigError as exc:  # a node name Slurm would not take
            fail(str(exc), 2)
        except TrainguardError as exc:
            fail(str(exc), 1)
    err.print(f"{node} released ({n} exclusion{'s' if n != 1 else ''})")


def release_problem(store: Store, node: str) -> str | None:
    """Why ``node`` cannot be released (it has no active exclusion), or None."""
    if node in store.active_excluded_nodes():
        return None
    known = (any(ex.node == node for ex in store.exclusions())
             or any(n.name == node for n in store.nodes()))
    if known:
        return f"{node} has no active exclusion: nothing to release"
    return (f"{node} is not a node the store knows (never excluded): nothing to release; "
            "`trainguard nodes` lists them")


def _verify_input(node: str, peers: str | None, checkpoint_dir: str | None,
                  time_limit_s: float, floors: Path | None
                  ) -> tuple[tuple[str, ...], CheckOptions]:
    """The peers and the check's options of ``release --verify``; ConfigError on bad input."""
    from trainguard.check.checker import CheckOptions
    from trainguard.check.hostnames import check_host_name

    check_host_name(node, "node")
    others = host_list(peers, "--peers") if peers else ()
    if node in others:
        raise ConfigError(f"--peers names {node} itself")
    options = CheckOptions(checkpoint_dir=checkpoint_dir, time_limit_s=time_limit_s,
                           floors=load_floors(floors))
    return others, options


def _verify(node: str, others: tuple[str, ...], options: CheckOptions, at: AgentsAt,
            db: str | None) -> None:
    """Check ``node`` (with ``others``); exit 1 with the reasons unless it passes."""
    from trainguard.check.model import Level

    if not others:
        warn("no --peers: the node is compared with the floors only (and its links are not "
             "measured)")
    report = run_host_check((node, *others), options, at, db, "release")
    level = report.verdicts.get(node, Level.PASS)
    if level in (Level.SLOW, Level.FAIL):
        reasons = "; ".join(f.reason for f in report.problems() if node in f.hosts)
        fail(f"{node} not released: its check says {level.value}: {reasons}", 1)
    flagged_peers = [h for h in report.flagged() if h != node]
    if flagged_peers:
        warn(f"peer(s) {', '.join(flagged_peers)} did not pass the check themselves")
    err.print(f"{node} passed its check ({report.duration_s:.1f} s)")


__all__ = ["app"]
