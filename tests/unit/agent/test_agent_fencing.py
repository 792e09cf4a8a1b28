"""Fencing on the agent's side (issue 26): an agent whose attempt is over, or whose lease on
the controller ran out (a cut link, a stopped-then-continued agent), kills its ranks before it
does anything else, and a lost host's launcher is killed before the relaunch."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.backend import fencing_orphan_timeout
from trainguard.agent.client import Identity
from trainguard.agent.hub import AgentHub
from trainguard.agent.launch_local import SubprocessAgents
from trainguard.agent.runner import EXIT_FENCED, EXIT_ORPHANED, Agent, AgentConfig
from trainguard.errors import ConfigError

SECRET = "s" * 64


class FakeHost:
    """Records what the agent asks of its host, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stopped = threading.Event()

    def poll(self, now: float, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append("poll")
        return []

    def stop(self, grace_s: float) -> None:
        self.calls.append(f"stop {grace_s:g}")
        self.stopped.set()

    def close(self) -> None:
        self.calls.append("close")


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def _run(agent: Agent) -> tuple[threading.Thread, list[int]]:
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(agent.run()), daemon=True)
    thread.start()
    return thread, status


@pytest.fixture
def hub() -> Any:
    h = AgentHub(SECRET, "sess", host="127.0.0.1", port=0, heartbeat_s=0.2)
    h.start()
    yield h
    h.close()


def _agent(hub: AgentHub, tmp_path: Path, attempt: int, host: FakeHost,
           clock: Clock | None = None, orphan_s: float = 60.0) -> Agent:
    addr = hub.address
    cfg = AgentConfig(addr[0], addr[1], Identity("agent", "n1", "sess", attempt,
                                                 SECRET.encode()),
                      tmp_path, poll_s=0.02, orphan_timeout_s=orphan_s)
    return Agent(cfg, host, clock=clock or time.monotonic)  # type: ignore[arg-type]


def test_an_agent_reconnecting_for_an_old_attempt_kills_its_ranks_first(
        hub: AgentHub, tmp_path: Path) -> None:
    hub.expect(1, ["n2"])  # the relaunch: attempt 1, without the lost n1
    host = FakeHost()
    thread, status = _run(_agent(hub, tmp_path, 0, host))
    # Not after its 60 s orphan timeout: the controller's answer says the attempt is over.
    assert host.stopped.wait(10), host.calls
    thread.join(10)
    assert status == [EXIT_FENCED]
    first_stop = host.calls.index("stop 0")
    assert "stop 0" in host.calls[first_stop:first_stop + 1]  # no grace for the ranks


def test_a_forged_stale_answer_is_not_obeyed(tmp_path: Path) -> None:
    """A controller that does not know the secret cannot make an agent kill its ranks."""
    other = AgentHub("x" * 64, "sess", host="127.0.0.1", port=0)
    other.start()
    try:
        other.expect(1, ["n2"])
        host = FakeHost()
        _, status = _run(_agent(other, tmp_path, 0, host, orphan_s=1.5))
        assert host.stopped.wait(10)
        assert status == [] or status == [EXIT_ORPHANED]  # only its own lease ran out
        time.sleep(0.3)
        assert status == [EXIT_ORPHANED]
    finally:
        other.close()


def test_a_stopped_agent_fences_itself_when_it_wakes(hub: AgentHub, tmp_path: Path) -> None:
    """SIGSTOP then SIGCONT, seen through the clock: the controller's heartbeats are still
    arriving (buffered), yet the lease ran out while the agent was stopped: its ranks are
    killed before it polls them, relays anything or handles a command."""
    hub.expect(0, ["n1"])
    host = FakeHost()
    clock = Clock()
    thread, status = _run(_agent(hub, tmp_path, 0, host, clock, orphan_s=5.0))
    deadline = time.monotonic() + 10
    while not hub.peers()["n1"].connected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hub.peers()["n1"].connected
    time.sleep(0.3)
    assert not host.stopped.is_set()
    seen = len(host.calls)
    clock.offset += 6.0  # the agent "was stopped" for 6 s
    assert host.stopped.wait(5), host.calls[-5:]
    thread.join(10)
    assert status == [EXIT_ORPHANED]
    woke = host.calls[seen:]
    assert woke[0] == "stop 0", woke[:5]


def test_the_orphan_timeout_is_shorter_than_the_node_timeout() -> None:
    assert fencing_orphan_timeout(30.0) == 20.0
    assert fencing_orphan_timeout(60.0) == 50.0
    assert fencing_orphan_timeout(6.0) < 6.0
    assert fencing_orphan_timeout(6.0, 2.0) == 2.0
    with pytest.raises(ConfigError, match="shorter than the node timeout"):
        fencing_orphan_timeout(6.0, 6.0)


def _alive(pid: int) -> bool:
    """Running, stopped or sleeping: anything but gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_fencing_a_lost_host_kills_its_launcher_and_what_it_started(tmp_path: Path) -> None:
    """Stopped, it still dies, and so does a rank in its own session that would not die with
    its agent (no PR_SET_PDEATHSIG): when ``fence`` returns, nothing of the tree runs, and the
    rank never got a SIGTERM to act on (its handler would have written a file)."""
    touched = tmp_path / "rank-saw-sigterm"
    rank = ("import pathlib,signal,time; signal.signal(signal.SIGTERM, lambda *a: "
            f"pathlib.Path({str(touched)!r}).write_text('x')); time.sleep(60)")
    agent = ("import subprocess,sys,time; r = subprocess.Popen([sys.executable,'-c',"
             f"{rank!r}], start_new_session=True); print(r.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", agent], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    assert proc.stdout is not None
    rank_pid = int(proc.stdout.readline())
    try:
        time.sleep(0.3)
        proc.send_signal(19)  # SIGSTOP: a stopped agent
        os.kill(rank_pid, 19)  # and its rank, blocked behind it
        agents = SubprocessAgents({"lost": proc, "fine": other})
        started = time.monotonic()
        agents.fence(("lost",))
        assert proc.poll() is not None
        assert not _alive(rank_pid)  # gone (or a zombie) already, not "soon"
        assert time.monotonic() - started < 5
        assert not touched.exists()  # SIGKILL at once: no handler ran
        assert other.poll() is None  # only the lost host's launcher
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank_pid, 9)
        for p in (proc, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_reaping_after_the_grace_kills_a_rank_that_left_its_agents_session() -> None:
    """An agent that does not exit within the grace is killed with everything it started: a
    rank in a session of its own (outside the launcher's process group) too, not only the
    group; an agent that exited in time is left alone."""
    agent = ("import subprocess,sys,time; r = subprocess.Popen([sys.executable,'-c',"
             "'import time; time.sleep(60)'], start_new_session=True); print(r.pid, flush=True);"
             " time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", agent], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    assert proc.stdout is not None
    rank_pid = int(proc.stdout.readline())
    try:
        done.wait()
        SubprocessAgents({"slow": proc, "done": done}).reap(0.2)
        assert proc.poll() is not None
        assert not _alive(rank_pid)
        assert done.returncode == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank_pid, 9)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
