"""A launch from which no agent connects (issue 28): the error quotes what each launcher said
last and names its log, it is raised once (stopping and closing the attempt do not say it
again), and no rank is reported as killed, since none started."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.hub import Inbound, PeerView
from trainguard.agent.launchlog import ended_text, last_lines, launchers_ended
from trainguard.agent.remote import RemoteAttempt
from trainguard.errors import LaunchError
from trainguard.recover.launchplan import LaunchPlan, RankLaunch


class SilentHub:
    """No agent ever connects; the nodes' peers exist (the hub expects them)."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = tuple(nodes)
        self.sent: list[tuple[str, Mapping[str, Any]]] = []

    def peers(self) -> dict[str, PeerView]:
        return {n: PeerView(False, 0.0, False, None, 0) for n in self.nodes}

    def take(self) -> list[Inbound]:
        return []

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        self.sent.append((node, msg))
        return False


class EndedLaunchers:
    """Launchers that all ended with ``status``, each having written ``said`` to its log."""

    def __init__(self, log_dir: Path, said: Mapping[str, str], status: int) -> None:
        self.logs = {node: log_dir / f"agent-{node}.log" for node in said}
        for node, text in said.items():
            self.logs[node].write_text(text)
        self.status = status
        self.closed = False

    def exited(self) -> Mapping[str, int]:
        return {n: self.status for n in self.logs}

    def log_of(self, node: str) -> Path | None:
        return self.logs.get(node)

    def close(self, wait_s: float) -> None:
        self.closed = True


def _attempt(tmp_path: Path, procs: Any, nodes: tuple[str, ...] = ("h1", "h2")
             ) -> RemoteAttempt:
    ranks = tuple(RankLaunch(r, 0, node, r, {"TRAINGUARD_EVENTS": str(tmp_path / f"r{r}.ev")},
                             tmp_path / f"r{r}.log") for r, node in enumerate(nodes))
    plan = LaunchPlan(attempt=0, command=("true",), nodes=nodes, ranks=ranks, workdir=tmp_path)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    return RemoteAttempt(plan, SilentHub(nodes), procs,  # type: ignore[arg-type]
                         clock=lambda: now[0], sleep=sleep, connect_timeout_s=60.0)


def test_the_error_quotes_each_launchers_last_line_and_names_its_log(tmp_path: Path) -> None:
    procs = EndedLaunchers(tmp_path, {
        "h1": "Warning: something harmless\nssh: connect to host h1 port 22: Connection "
              "refused\n",
        "h2": "ssh: Could not resolve hostname h2: Name or service not known\n\n"}, 255)
    attempt = _attempt(tmp_path, procs)
    with pytest.raises(LaunchError) as raised:
        attempt.poll()
    text = str(raised.value)
    assert text.startswith("no agent connected to the controller: h1: launcher exited with "
                           "status 255: ")
    assert '"Warning: something harmless | ssh: connect to host h1 port 22: Connection ' \
           f'refused" (log: {tmp_path / "agent-h1.log"})' in text
    assert '"ssh: Could not resolve hostname h2: Name or service not known" ' \
           f'(log: {tmp_path / "agent-h2.log"})' in text
    assert attempt.broken == text


def test_a_broken_launch_is_said_once_and_reports_no_killed_rank(tmp_path: Path) -> None:
    procs = EndedLaunchers(tmp_path, {"h1": "refused\n", "h2": "refused\n"}, 255)
    attempt = _attempt(tmp_path, procs)
    with pytest.raises(LaunchError):
        attempt.poll()
    assert attempt.poll() == []  # said once: the supervisor stops and closes without it again
    assert attempt.stop(30.0) == []  # no rank ever started: none is reported killed
    assert attempt.running() == frozenset()
    attempt.close()
    assert procs.closed


def test_launchers_that_wrote_nothing_say_so(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path, EndedLaunchers(tmp_path, {"h1": "", "h2": " \n"}, 1),
                       nodes=("h1", "h2"))
    with pytest.raises(LaunchError, match=r"h1: launcher exited with status 1 and wrote "
                                          r"nothing \(log: .*agent-h1\.log\)"):
        attempt.poll()


def test_last_lines_are_bounded_and_safe_for_a_terminal(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"x" * 100_000 + b"\nfirst\n\x1b[31mred\x1b[0m " + b"y" * 1000 + b"\n\n")
    lines = last_lines(log)
    assert lines[0] == "first"
    assert lines[1].startswith("red y") and len(lines[1]) == 300 and "\x1b" not in lines[1]
    assert last_lines(tmp_path / "missing.log") == ()


def test_many_failed_launchers_are_counted_after_the_first_three() -> None:
    parts = [ended_text(f"n{i}", 255, ("refused",), None) for i in range(5)]
    text = launchers_ended(parts)
    assert text.count("refused") == 3 and text.endswith("; and 2 more nodes")


class OneByOne(EndedLaunchers):
    """Launchers that end one at a time (``ended`` grows)."""

    def __init__(self, log_dir: Path, said: Mapping[str, str], status: int) -> None:
        super().__init__(log_dir, said, status)
        self.ended: list[str] = []

    def exited(self) -> Mapping[str, int]:
        return {n: self.status for n in self.ended}


def test_launchers_failing_one_by_one_are_one_broken_launch_not_a_lost_host(
        tmp_path: Path) -> None:
    procs = OneByOne(tmp_path, {"h1": "refused\n", "h2": "refused\n"}, 255)
    attempt = _attempt(tmp_path, procs)
    procs.ended.append("h1")
    assert attempt.poll() == [] and attempt.node_events() == [] and attempt.lost == {}
    procs.ended.append("h2")
    with pytest.raises(LaunchError, match=r"h1: launcher .*; h2: launcher "):
        attempt.poll()
    assert attempt.node_events() == []  # nobody is blamed for a launch broken for all


def test_a_failed_launcher_is_a_lost_host_once_another_agent_connected(tmp_path: Path) -> None:
    procs = OneByOne(tmp_path, {"h1": "ssh: refused\n", "h2": ""}, 255)
    attempt = _attempt(tmp_path, procs)
    procs.ended.append("h1")
    attempt.poll()
    hub = attempt._hub
    assert isinstance(hub, SilentHub)
    hub.peers = lambda: {"h1": PeerView(False, 0.0, False, None, 0),  # type: ignore[method-assign]
                         "h2": PeerView(True, 0.0, True, None, 1)}
    attempt.poll()
    (event,) = attempt.node_events()
    assert event.host == "h1" and event.signature == "node_lost"
    assert '"ssh: refused" (log: ' in event.summary


class CleanBackend:
    """Records the clean-up launches; every agent it starts answers at once."""

    def __init__(self, reached: frozenset[str]) -> None:
        self._reached = reached
        self.launched: list[tuple[str, ...]] = []

    def reached(self) -> frozenset[str]:
        return self._reached

    def launch(self, plan: LaunchPlan) -> Any:
        self.launched.append(plan.nodes)
        nodes = set(plan.nodes)

        class Answering:
            def connected(self) -> frozenset[str]:
                return frozenset(nodes)

            def request(self, ask: Iterable[str], msg: Mapping[str, Any],
                        timeout_s: float) -> dict[str, Mapping[str, Any]]:
                return {n: {"removed": True} for n in ask}

            def close(self) -> None:
                pass

        return Answering()


@pytest.mark.parametrize(("reached", "cleaned"), [
    (frozenset(), []), (frozenset({"h2"}), [("h2",)])])
def test_snapshots_are_cleaned_only_where_an_agent_ever_ran(
        tmp_path: Path, reached: frozenset[str], cleaned: list[tuple[str, ...]]) -> None:
    """After a launch no agent connected from, there is no snapshot directory on any host:
    the clean-up starts no agents (which would fail, and say the launch's error again)."""
    from trainguard.agent.snapplane import AgentSnapshotPlane

    backend = CleanBackend(reached)
    plane = AgentSnapshotPlane(tmp_path, "run", ("h1", "h2"), lambda node, msg: False,
                               backend=backend)
    plane.close(remove=True)
    assert backend.launched == cleaned
