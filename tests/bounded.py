"""Run code under a time and memory bound, so a regression fails a test instead of eating the
machine: `trainguard` in a subprocess with an address-space limit (RLIMIT_AS) and a timeout, and
an in-process deadline (SIGALRM) for pure functions.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

_CLI = "import sys; from trainguard.cli.main import app; sys.argv[0] = 'trainguard'; app()"


@dataclass(frozen=True)
class Bounded:
    """What a bounded CLI run did; `timed_out` when it was killed at the deadline."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error: ")]


def run_cli(*args: str, timeout_s: float, max_memory_mib: int) -> Bounded:
    """`trainguard ARGS...` in a child limited to `max_memory_mib` of address space; killed (by
    its PID, with its process group) after `timeout_s`."""
    limit = max_memory_mib << 20

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=limit_memory)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Bounded(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Bounded(None, out, err, True)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class DeadlineExceeded(Exception):
    """Raised inside the code under test when its `deadline` passes."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block with `DeadlineExceeded` after `seconds` (main thread, Unix only)."""
    def on_alarm(_sig: int, _frame: FrameType | None) -> None:
        raise DeadlineExceeded(f"took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
