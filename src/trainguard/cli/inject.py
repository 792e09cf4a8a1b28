"""`trainguard inject`: faults into a running `trainguard run` (tests, demos, fire drills).

Each step is said on stderr as it happens (finding the run, waiting for its ranks, the rank's
process, the signal, the confirmation), so a command that waits never looks stuck. A kill or
hang is recorded in the run dir (``attempts/<i>/injected.jsonl``) before the signal goes out:
the supervisor names the failure it causes as injected, not as a crash of unknown cause
(:mod:`trainguard.recover.injected`).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from trainguard.cli.console import err, fail
from trainguard.cli.options import duration_option
from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.inject import append_line, xid_line
from trainguard.recover.injected import (
    BY_COMMAND,
    SIGNALS,
    Injection,
    injections_path,
    record_injection,
)
from trainguard.trace.collect import process_state

inject_app = typer.Typer(
    help="Inject faults into a running `trainguard run` (tests, demos, fire drills); each "
    "step is said on stderr.\n\nThe in-process faults (nan, slow, cuda_error, exception, "
    "corrupt_checkpoint) are given to `trainguard run --inject KIND:key=value,...` and fired "
    "by the SDK.\n\nExit status: 0 delivered (and, for local ranks, seen); 1 not delivered "
    "or not seen; 2 bad input (no run there, no such rank, a missing --rank).",
    no_args_is_help=True)

CONFIRM_S = 5.0
"""How long a local kill or stop is waited for before the command says it was not seen."""
_POLL_S = 0.05


def say(message: str) -> None:
    """One progress line on stderr."""
    err.print(f"inject: {message}", markup=False)


class NotRunning(ConfigError):
    """The run dir holds no running run."""


def read_state(run_dir: Path) -> dict[str, Any]:
    """The run's ``state.json`` while it runs; :class:`NotRunning` otherwise."""
    path = run_dir / "state.json"
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotRunning(f"{path} does not exist: is a `trainguard run --run-dir {run_dir}` "
                         "running?") from None
    except (OSError, ValueError) as exc:
        raise NotRunning(f"cannot read {path}: {exc}") from exc
    if state.get("status") != "running":
        raise NotRunning(f"the run in {run_dir} is not running (status: {state.get('status')})")
    return state


def wait_for_ranks(run_dir: Path, wait_s: float, *, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """``state.json`` once the current attempt lists its ranks (or runs through a controller).
    An attempt that is still launching is waited for, at most ``wait_s`` seconds (said once);
    LaunchError when it does not come up in time."""
    deadline = clock() + wait_s
    said = False
    while True:
        state = read_state(run_dir)
        if state.get("control") or state.get("ranks"):
            return state
        if clock() >= deadline:
            raise LaunchError(f"attempt {state.get('attempt')} of the run in {run_dir} did not "
                              f"list its ranks within {wait_s:g} s (still launching?)")
        if not said:
            say(f"attempt {state.get('attempt')} is launching: waiting up to {wait_s:g} s for "
                "its ranks' process ids")
            said = True
        sleep(_POLL_S)


def rank_pid(state: dict[str, Any], rank: int) -> tuple[int, str]:
    """(pid, node) of ``rank`` in the current attempt; ConfigError when it has no such rank."""
    ranks = [r for r in state.get("ranks", []) if isinstance(r, dict)]
    for r in ranks:
        if r.get("rank") == rank and isinstance(r.get("pid"), int):
            return int(r["pid"]), str(r.get("node"))
    known = sorted(r["rank"] for r in ranks if isinstance(r.get("rank"), int))
    have = f"ranks {known[0]}-{known[-1]}" if known else "no ranks"
    raise ConfigError(f"rank {rank} is not part of the current attempt ({have})")


def confirm(pid: int, kind: str, *, timeout_s: float = CONFIRM_S,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep,
            state_of: Callable[[int], str] = process_state) -> bool:
    """Whether the local process ``pid`` is seen gone (kill) or stopped (hang) in time."""
    want = ("stopped",) if kind == "hang" else ("exited", "zombie")
    deadline = clock() + timeout_s
    while state_of(pid) not in want:
        if clock() >= deadline:
            return False
        sleep(_POLL_S)
    return True


RunDirOpt = Annotated[Path, typer.Option("--run-dir", help="The run's --run-dir.")]
RankOpt = Annotated[int | None, typer.Option(
    "--rank", help="Global rank (required).", min=0, show_default=False)]
WaitOpt = Annotated[float, duration_option(
    "--wait", help="Seconds to wait for an attempt that is still launching to list its ranks.",
    min=0.0)]


def _ask_controller(run_dir: Path, state: dict[str, Any], request: dict[str, Any]) -> str:
    """A request to the run's controller, which passes it to the node's agent; its answer."""
    from trainguard.agent.client import ask
    from trainguard.agent.wire import WireError

    path = run_dir / str(state["control"])
    try:
        control = json.loads(path.read_text())
        answer = ask(str(control["host"]), int(control["port"]), str(control["session"]),
                     str(control["secret"]), request)
    except (OSError, ValueError, KeyError, TypeError, WireError) as exc:
        fail(f"cannot reach the run's controller ({path}): {exc}", code=1)
    if not answer.get("ok"):
        fail(str(answer.get("message")), code=2)
    return str(answer.get("message"))


def _record(run_dir: Path, attempt: int, injection: Injection) -> None:
    """Tell the supervisor the failure to come is injected (before the signal goes out)."""
    try:
        record_injection(injections_path(run_dir, attempt), injection)
    except OSError as exc:
        fail(f"cannot record the injection in {run_dir}: {exc.strerror or exc}")


def signal_rank(run_dir: Path, rank: int | None, kind: str, wait_s: float) -> None:
    """Deliver ``kind`` (kill: SIGKILL; hang: SIGSTOP) to ``rank``, saying each step."""
    verb = {"kill": "kill", "hang": "stop"}[kind]
    if rank is None:
        fail(f"inject {kind} needs --rank: the global rank to {verb} (ranks and pids of the "
             f"current attempt: {run_dir / 'state.json'})")
    signum = SIGNALS[kind]
    name = signal.Signals(signum).name
    say(f"looking for the run in {run_dir}")
    try:
        state = wait_for_ranks(run_dir, wait_s)
        attempt = int(state.get("attempt") or 0)
        if state.get("control"):
            say(f"asking the run's controller to send {name} to rank {rank} (attempt "
                f"{attempt})")
            _record(run_dir, attempt, Injection(kind, rank, None, BY_COMMAND, time.time()))
            answer = _ask_controller(run_dir, state, {"op": "signal", "rank": rank,
                                                      "signum": signum})
            say(f"done: {answer}")
            return
        pid, node = rank_pid(state, rank)
    except ConfigError as exc:
        fail(str(exc), code=2)
    except LaunchError as exc:
        fail(str(exc), code=1)
    say(f"rank {rank} of attempt {attempt} is pid {pid} on {node}: sending {name}")
    _record(run_dir, attempt, Injection(kind, rank, node, BY_COMMAND, time.time()))
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        fail(f"rank {rank} (pid {pid}) is no longer running", code=1)
    except PermissionError:
        fail(f"not allowed to signal rank {rank} (pid {pid})", code=1)
    seen = "stopped" if kind == "hang" else "gone"
    say(f"waiting up to {CONFIRM_S:g} s to see rank {rank} {seen}")
    if not confirm(pid, kind):
        fail(f"sent {name} to rank {rank} (pid {pid}) but did not see it {seen} within "
             f"{CONFIRM_S:g} s", code=1)
    done = "stopped" if kind == "hang" else "killed"
    say(f"done: {done} rank {rank} on {node} (pid {pid}); the run names the failure as "
        "injected")


@inject_app.command("kill")
def inject_kill(run_dir: RunDirOpt, rank: RankOpt = None, wait: WaitOpt = 30.0) -> None:
    """SIGKILL one rank (a crash)."""
    signal_rank(run_dir, rank, "kill", wait)


@inject_app.command("hang")
def inject_hang(run_dir: RunDirOpt, rank: RankOpt = None, wait: WaitOpt = 30.0) -> None:
    """SIGSTOP one rank (a hang: the others block in their next collective)."""
    signal_rank(run_dir, rank, "hang", wait)


@inject_app.command("xid")
def inject_xid(
    run_dir: RunDirOpt,
    node: Annotated[str, typer.Option("--node", help="Node whose kernel log gets the line.")],
    xid: Annotated[int, typer.Option("--xid", help="XID number.", min=1)] = 79,
) -> None:
    """Append an NVRM XID line to a node's watched kernel log."""
    say(f"looking for the run in {run_dir}")
    try:
        state = read_state(run_dir)
        attempt = int(state.get("attempt") or 0)
        injection = Injection("xid", None, node, BY_COMMAND, time.time())
        if state.get("control"):
            say(f"asking the run's controller to append XID {xid} to {node}'s kernel log")
            _record(run_dir, attempt, injection)
            answer = _ask_controller(run_dir, state, {"op": "kernel_line", "node": node,
                                                      "line": xid_line(node, xid)})
            say(f"done: {answer}")
            return
        logs = state.get("kernel_logs", {})
        if node not in logs:
            raise ConfigError(f"node {node!r} is not watched by this run "
                              f"(watched: {', '.join(sorted(logs))})")
        say(f"appending XID {xid} to {logs[node]}")
        _record(run_dir, attempt, injection)
        append_line(Path(logs[node]), xid_line(node, xid))
    except (ConfigError, LaunchError) as exc:
        fail(str(exc), code=2)
    say(f"done: appended XID {xid} to {logs[node]}")


@inject_app.command("corrupt-checkpoint")
def inject_corrupt(
    ckpt_dir: Annotated[Path, typer.Argument(help="A trainguard checkpoint directory.")],
) -> None:
    """Damage the newest checkpoint (its SHA-256 no longer matches): resume must fall back."""
    from trainguard.ckpt import CheckpointDir, corrupt_checkpoint

    try:
        infos = CheckpointDir(ckpt_dir).list()
        if not infos:
            raise ConfigError(f"no checkpoint in {ckpt_dir}")
        damaged = corrupt_checkpoint(infos[-1])
    except ConfigError as exc:
        fail(str(exc), code=2)
    say(f"corrupted {damaged} (checkpoint of step {infos[-1].step})")


__all__ = ["CONFIRM_S", "NotRunning", "confirm", "inject_app", "rank_pid", "read_state",
           "signal_rank", "wait_for_ranks"]
