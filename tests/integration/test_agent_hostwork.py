"""An agent's look at its host (HostWork.poll) with real rank processes: every byte of output
arrives even when a rank wrote more than one message's worth and then went quiet, exits come
after the rank's last output, and exits of ranks reaped by stop() are still reported."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.host import HostWork
from trainguard.agent.wire import CHUNK
from trainguard.evidence.rules import load_rules

pytestmark = pytest.mark.integration


def _launch(host: HostWork, tmp_path: Path, code: str, nranks: int = 1) -> None:
    host.launch({"t": "launch", "attempt": 0, "command": [sys.executable, "-c", code],
                 "workdir": str(tmp_path),
                 "ranks": [{"rank": r, "local_rank": r, "node_rank": 0, "env": {}}
                           for r in range(nranks)]})


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostWork]:
    work = HostWork("n1", tmp_path / "work", load_rules())
    try:
        yield work
    finally:
        work.stop(0.5)  # kills by process group whatever is left
        work.close()


def _poll_until(host: HostWork, done: Any, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while not done(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"not done in {timeout_s} s: {[m['t'] for m in got]}")
        got += host.poll(time.time())
        time.sleep(0.02)
    return got


def _out(msgs: list[dict[str, Any]]) -> bytes:
    return b"".join(m["data"] for m in msgs if m["t"] == "out")


def test_output_larger_than_one_message_arrives_whole_without_further_writes(
        host: HostWork, tmp_path: Path) -> None:
    lines = 3 * CHUNK // 100
    _launch(host, tmp_path, f"import sys, time\nfor i in range({lines}):\n"
                            "    sys.stdout.write(f'{i:098d}\\n')\nsys.stdout.flush()\n"
                            "time.sleep(60)")
    got = _poll_until(host, lambda g: _out(g).count(b"\n") >= lines)
    data = _out(got)
    assert data.count(b"\n") == lines
    assert len([m for m in got if m["t"] == "out"]) >= 3  # in pieces of about CHUNK


def test_an_exit_is_reported_once_after_the_ranks_last_output(
        host: HostWork, tmp_path: Path) -> None:
    _launch(host, tmp_path, "print('bye', flush=True)\nraise SystemExit(3)")
    got = _poll_until(host, lambda g: any(m["t"] == "exit" for m in g))
    kinds = [m["t"] for m in got if m["t"] in ("out", "exit")]
    assert kinds[-1] == "exit" and b"bye" in _out(got)
    assert [m["code"] for m in got if m["t"] == "exit"] == [3]
    more = [m for _ in range(5) for m in host.poll(time.time()) if m["t"] == "exit"]
    assert more == []


def test_ranks_reaped_by_stop_are_still_reported(host: HostWork, tmp_path: Path) -> None:
    _launch(host, tmp_path, "import time\ntime.sleep(60)", nranks=2)
    host.stop(2.0)  # TERMs and reaps both ranks
    got = _poll_until(host, lambda g: len([m for m in g if m["t"] == "exit"]) == 2, 5.0)
    assert sorted((m["rank"], m["code"]) for m in got if m["t"] == "exit") == [(0, -15),
                                                                               (1, -15)]


def test_a_rank_that_just_finished_is_not_a_zombie_to_the_hang_diagnosis(
        host: HostWork, tmp_path: Path) -> None:
    """Rank 0 finishes its work (exit 0) while rank 1 is stopped; nobody has reaped rank 0 when
    the diagnosis looks: it is reported finished (not a zombie, not a culprit), rank 1 stopped,
    and rank 0's exit still reaches the controller exactly once."""
    code = ("import os, signal, sys, time\n"
            "if os.environ['RANK'] == '1':\n"
            "    os.kill(os.getpid(), signal.SIGSTOP)\n"
            "raise SystemExit(0)")
    host.launch({"t": "launch", "attempt": 0, "command": [sys.executable, "-c", code],
                 "workdir": str(tmp_path),
                 "ranks": [{"rank": r, "local_rank": r, "node_rank": 0,
                            "env": {"RANK": str(r)}} for r in range(2)]})
    deadline = time.monotonic() + 20
    procs: dict[str, str] = {}
    while time.monotonic() < deadline:
        ranks = host.collect(1.0)["ranks"]
        procs = {r: str(v["proc"]) for r, v in ranks.items()}
        if procs["0"] != "running" and procs["1"] == "stopped":
            break
        time.sleep(0.05)
    assert procs == {"0": "finished", "1": "stopped"}
    got = _poll_until(host, lambda g: any(m["t"] == "exit" for m in g))
    assert [(m["rank"], m["code"]) for m in got if m["t"] == "exit"] == [(0, 0)]
