"""Node evidence read at an attempt's last look is said as found late: the ranks are gone, so
nothing is being stopped (the supervisor says so only of evidence that stops a running
attempt)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from trainguard.evidence.events import FailureEvent
from trainguard.evidence.rules import load_rules
from trainguard.recover.cancel import CancelToken
from trainguard.recover.chain import Chain, NodeEvidence
from trainguard.recover.failure import Trigger
from trainguard.recover.watch import NodeWatch


class NoScheduler:
    def exclude(self, node: str, reason: str) -> None:
        raise AssertionError("no spare is lost here")


@pytest.mark.parametrize(("ended", "said"), [
    (False, "n2: stopping the attempt: XID 79"),
    (True, "n2: XID 79"),
])
def test_a_fatal_event_is_said_for_what_it_does(tmp_path: Path, ended: bool, said: str) -> None:
    klog = tmp_path / "kern.log"
    klog.touch()
    lines: list[str] = []
    evidence = NodeEvidence(NodeWatch({"n2": klog}, load_rules()), CancelToken(),
                            NoScheduler(), lines.append)  # type: ignore[arg-type]
    with open(klog, "a") as f:
        f.write(f"{datetime.now(UTC).isoformat()} n2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                "pid=1, name=python, GPU has fallen off the bus.\n")
    found: dict[str, list[FailureEvent]] = {}
    trigger = evidence.poll(("n1", "n2"), Chain(("n1", "n2"), []), found, 0.0, ended=ended)
    assert trigger is Trigger.NODE_EVIDENCE and [e.xid for e in found["n2"]] == [79]
    (line,) = lines
    assert line.startswith(said)
    assert line.endswith("(logged as the attempt ended)") is ended
