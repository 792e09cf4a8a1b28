"""External probe commands (``dcgmi``) run so that nothing they start outlives the probe.

Each command runs in a session and process group of its own (``start_new_session``). On its
time limit the whole group gets SIGTERM, then SIGKILL after a short grace: a tool that forked
helpers (``dcgmi`` talks to a host engine, a shell wrapper runs children) leaves none behind,
and its output pipes close so reading them cannot hang. Groups still running when the process
exits (the agent told ``bye`` mid-probe) are killed the same way from an ``atexit`` hook; an
agent killed outright takes the leader along (``PR_SET_PDEATHSIG``).

    done = run_command(["dcgmi", "diag", "-r", "1"], timeout_s=27.0)
    done.timed_out, done.returncode, done.output
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass

TERM_GRACE_S = 1.0
"""How long a group has between SIGTERM and SIGKILL."""

MAX_OUTPUT = 1 << 20
"""The most of each output stream kept (bytes)."""

_live: set[int] = set()
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a probe command did."""

    returncode: int | None
    """None when it was killed at its time limit."""
    output: str
    """stdout then stderr, decoded with replacement."""
    timed_out: bool


def kill_group(pgid: int, grace_s: float = TERM_GRACE_S,
               proc: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM to the group ``pgid``, then SIGKILL after ``grace_s`` (at once when the leader
    ``proc`` has not exited by then, and always once more for children that ignored TERM)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_command(argv: Sequence[str], timeout_s: float,
                max_output: int = MAX_OUTPUT) -> CommandResult:
    """``argv`` with its output captured (the first ``max_output`` bytes of each stream), its
    whole process group killed at ``timeout_s`` and whenever its leader ends (helpers it left
    in its group go with it). OSError when it cannot be started."""
    # Files, not pipes: a helper that inherited the output cannot hold the reading open.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        from trainguard.recover.local import die_with_parent  # (heavy: only when a probe runs)

        # die_with_parent: the leader also dies with an agent that is killed outright
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, preexec_fn=die_with_parent)
        pgid = proc.pid  # a new session's leader leads its group
        with _lock:
            _live.add(pgid)
        timed_out = False
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(pgid, proc=proc)
        finally:
            kill_group(pgid, grace_s=0.0)
            with _lock:
                _live.discard(pgid)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        text = ""
        for stream in (out, err):
            stream.seek(0)
            text += stream.read(max_output).decode(errors="replace")
    return CommandResult(None if timed_out else proc.returncode, text, timed_out)


@atexit.register
def _kill_leftovers() -> None:
    with _lock:
        groups = list(_live)
        _live.clear()
    for pgid in groups:
        kill_group(pgid, grace_s=0.2)


__all__ = ["MAX_OUTPUT", "TERM_GRACE_S", "CommandResult", "kill_group", "run_command"]
