"""A rank's exit goes to the controller only after its output: the agent reads an ended rank's
files to their end whatever its directory watch (inotify) reported, and sends a last line the
rank never ended (its newline added)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent import host as host_mod
from trainguard.agent.host import HostWork
from trainguard.evidence.rules import load_rules

SCRIPT = ("import os, sys\nfor i in range(50): print(f'line {i}', flush=True)\n"
          "os.write(1, b'RuntimeError: last words')\nsys.exit(3)\n")


class BlindWatch:
    """A watch that misses every event (as a full inotify queue read at the wrong moment, or a
    filesystem whose writes it does not see, would)."""

    def changed(self) -> set[str]:
        return set()

    def close(self) -> None:
        pass


def run_to_exit(host: HostWork, budget: int | None) -> list[dict[str, Any]]:
    host.launch({"t": "launch", "attempt": 0, "command": [sys.executable, "-c", SCRIPT],
                 "workdir": str(host.work_dir), "ranks": [
                     {"rank": 0, "local_rank": 0, "node_rank": 0, "env": {}}]})
    msgs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while not any(m["t"] == "exit" for m in msgs):
        assert time.monotonic() < deadline, msgs
        msgs += host.poll(time.time(), budget)
        time.sleep(0.02)
    return msgs


@pytest.mark.parametrize("blind", [False, True])
@pytest.mark.parametrize("budget", [None, 64])
def test_every_line_goes_out_before_the_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             blind: bool, budget: int | None) -> None:
    if blind:
        monkeypatch.setattr(host_mod.DirWatch, "open", lambda directory: BlindWatch())
    host = HostWork("a", tmp_path / "work", load_rules, base_env=dict(os.environ))
    try:
        msgs = run_to_exit(host, budget)
    finally:
        host.stop(0.5)
        host.close()
    kinds = [m["t"] for m in msgs if m["t"] in ("out", "exit")]
    assert kinds[-1] == "exit" and kinds.count("exit") == 1
    text = b"".join(m["data"] for m in msgs if m["t"] == "out").decode()
    assert text.splitlines() == [f"line {i}" for i in range(50)] + ["RuntimeError: last words"]
    assert text.endswith("\n")
    assert [m["code"] for m in msgs if m["t"] == "exit"] == [3]
