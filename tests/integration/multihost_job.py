"""Running ``trainguard run`` against a namespaced multi-host cluster (shared by the multi-host
acceptance tests and ``make bench``).

The controller runs here, in the root namespace, as on a login node; each node's agent is
started inside its host through the cluster's enter script and dials the controller on the
bridge address. The job is an ordinary DDP script (no trainguard SDK); checkpoints go to the
cluster's one shared directory. The run directory is under the test's own tmp dir: no host can
see it, and the controller cannot see the hosts' /tmp or /var/log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from trainguard.devcluster import HostCluster

SCRIPT = Path(__file__).parent / "scripts" / "plain_ddp.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]


def _unavailable(reason: str) -> NoReturn:
    """Skip locally; fail in CI, where the namespaced cluster is required."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: the multi-host tests are required)", pytrace=False)
    pytest.skip(reason)


XID79 = ("[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
         "GPU has fallen off the bus.")
"""A real-format NVRM line for a host's own kernel log."""

STARTED: list[Job] = []
"""Every job started, so a fixture can kill what a failed test left running."""


def kill_all() -> None:
    while STARTED:
        STARTED.pop().kill()


@pytest.fixture()
def no_job_left() -> Iterator[None]:
    """After each test: kill what a failed test's run left, so it cannot disturb the next."""
    yield
    kill_all()


class Job:
    """One supervised run on the cluster; :meth:`wait` returns its summary."""

    def __init__(self, cluster: HostCluster, root: Path, name: str, *,
                 nodes: Sequence[str] = ("host1", "host2", "host3"),
                 spares: Sequence[str] = ("host4",), steps: int = 40,
                 extra: Sequence[str] = (), script_args: Sequence[str] = (),
                 backend: Sequence[str] | None = None, wrapper: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        """``backend``: the backend options (default: local agents entered into each host);
        ``wrapper``: what runs the controller (``salloc ... --``)."""
        self.cluster = cluster
        self.run_dir = root / name
        self.ckpt = cluster.shared / f"ckpt-{name}"
        self.loss = cluster.shared / f"loss-{name}.txt"
        self.log = root / f"{name}.log"
        if backend is None:
            backend = ["--agent-exec", f"{cluster.enter_script} {{node}}"]
        argv = [*wrapper, *TG, "run", "--run-dir", str(self.run_dir), "--no-db",
                "--nodes", ",".join(nodes), "--spares", ",".join(spares),
                "--nproc-per-node", "1", *backend,
                "--controller-addr", cluster.bridge_addr,
                "--kernel-log", "/var/log/kern.log", "--backoff", "0", *extra,
                "--", sys.executable, str(SCRIPT), "--steps", str(steps),
                "--ckpt-dir", str(self.ckpt), "--loss-log", str(self.loss), *script_args]
        self.started = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=Path(__file__).parents[2],
                                         env=None if env is None else dict(env),
                                         start_new_session=True)
        STARTED.append(self)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_step(self, step: int, attempt: int = 0, node: str = "host1",
                      rank: int = 0, timeout_s: float = 120) -> float:
        """Until the rank printed ``step N`` (read from the controller's own mirror of its
        output); returns when."""
        path = self.run_dir / "attempts" / str(attempt) / node / f"rank{rank}.log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended early:\n{self.output()[-3000:]}")
            try:
                if f"step {step} loss" in path.read_text(errors="replace"):
                    return time.monotonic()
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"no step {step} within {timeout_s} s:\n{self.output()[-3000:]}")

    def wait(self, timeout_s: float = 240) -> dict[str, Any]:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the run did not end in {timeout_s} s:\n"
                                 f"{self.output()[-3000:]}") from None
        summary: dict[str, Any] = json.loads((self.run_dir / "summary.json").read_text())
        return summary

    def attempts_why(self, summary: dict[str, Any]) -> str:
        """Each attempt's nodes, status, failure and decision, then the output's tail: what an
        assertion on the number of attempts shows when a run took another."""
        rows = [f"attempt {a.get('index')}: nodes={a.get('nodes')} status={a.get('status')} "
                f"exit_codes={a.get('exit_codes')} failure={a.get('failure_category')} "
                f"({(a.get('failure') or {}).get('summary')}) decision={a.get('decision')} "
                f"reason={a.get('reason')}" for a in summary.get("attempts", [])]
        return "\n".join([*rows, self.output()[-3000:]])

    def final_loss(self) -> float:
        return float(self.loss.read_text().strip())

    def control(self) -> dict[str, Any]:
        path = self.run_dir / "control.json"
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def rank_pids(cluster: HostCluster, node: str, marker: str = "plain_ddp.py") -> list[int]:
    """Root-namespace pids of ``node``'s processes whose command line has ``marker``."""
    found = []
    for pid in cluster.processes(node):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append(pid)
    return found


__all__ = ["SCRIPT", "Job", "rank_pids"]
