"""An attempt's end takes each agent's last words: what an agent read after its ranks ended (a
last output line, an XID its host logged as they exited) reaches the controller's records
before the attempt is judged; an agent that does not hang up does not hold the run for long,
and hanging up on ``bye`` never makes a host look lost."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from test_lying_agent import FakeHub, NoProcs, two_rank_plan

from trainguard.agent import remote as remote_mod
from trainguard.agent.hub import Inbound, PeerView
from trainguard.agent.remote import RemoteAttempt
from trainguard.evidence.events import FailureEvent
from trainguard.taxonomy import Action, Category, Severity

XID = FailureEvent(category=Category.GPU_HARDWARE, action=Action.EXCLUDE_NODE,
                   severity=Severity.FATAL, signature="xid_79",
                   summary="XID 79: GPU has fallen off the bus", host="b")


class ByeHub(FakeHub):
    """Agents that, told ``bye``, send what they read last and hang up (as agent.runner's
    flush does), or (``mute``) never hang up."""

    def __init__(self, last: Mapping[str, list[dict[str, Any]]], mute: frozenset[str] = frozenset(),
                 ) -> None:
        super().__init__(("a", "b"))
        self.last = last
        self.mute = mute
        self.gone: set[str] = set()
        self.sent: list[tuple[str, str]] = []

    def peers(self) -> dict[str, PeerView]:
        return {n: PeerView(n not in self.gone, 0.0, True, None, 1) for n in self.nodes}

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        self.sent.append((node, str(msg.get("t"))))
        if msg.get("t") == "bye" and node not in self.mute:
            self.queue += [Inbound(node, 0, m, 0.0) for m in self.last.get(node, [])]
            self.gone.add(node)
        return True


def attempt(tmp_path: Path, hub: ByeHub) -> tuple[RemoteAttempt, list[float]]:
    plan = two_rank_plan(tmp_path)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    handle = RemoteAttempt(plan, hub, NoProcs(), clock=lambda: now[0],  # type: ignore[arg-type]
                           sleep=sleep, node_timeout_s=1.0, connect_timeout_s=1e9)
    return handle, now


def test_an_xid_and_a_line_sent_after_the_ranks_ended_are_kept(tmp_path: Path) -> None:
    hub = ByeHub({"b": [{"t": "out", "rank": 1, "data": b"last line\n"},
                        {"t": "klog", "event": XID.to_dict()}]})
    handle, _ = attempt(tmp_path, hub)
    handle.close()
    assert (tmp_path / "r1.log").read_text() == "last line\n"
    (ev,) = handle.node_events()
    assert ev.signature == "xid_79" and ev.host == "b"
    assert handle.lost == {}


def test_an_agent_that_does_not_hang_up_holds_the_end_a_few_seconds_only(
        tmp_path: Path) -> None:
    hub = ByeHub({"a": [{"t": "out", "rank": 0, "data": b"bye from a\n"}]},
                 mute=frozenset({"b"}))
    handle, now = attempt(tmp_path, hub)
    handle.close()
    assert remote_mod._BYE_WAIT_S <= now[0] < remote_mod._BYE_WAIT_S + 0.1
    assert (tmp_path / "r0.log").read_text() == "bye from a\n"
    # far past node_timeout_s, yet nobody is lost and nothing is launched meanwhile
    assert handle.lost == {} and handle.node_events() == []
    kinds = [t for _, t in hub.sent]
    assert kinds[kinds.index("bye"):] == ["bye", "bye"]


def test_a_lost_host_is_not_waited_for(tmp_path: Path) -> None:
    hub = ByeHub({}, mute=frozenset({"a", "b"}))
    hub.gone = {"a", "b"}  # both hung up already (the ranks' hosts died)
    handle, now = attempt(tmp_path, hub)
    handle.close()
    assert now[0] < 0.1
