"""Collecting a hung job's facts from real processes: process states, which processes catch
the stack signal, and their stacks (faulthandler), never killing one that does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.trace.collect import STACK_SIGNAL, catches, process_state, request_stacks

SDK_LIKE = """
import faulthandler, signal, sys, time
f = open(sys.argv[1], "a")
faulthandler.register(signal.SIGUSR2, file=f, all_threads=True)
print("ready", flush=True)
def waiting_in_a_collective():
    time.sleep(60)
waiting_in_a_collective()
"""
PLAIN = "import time; print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(10)


def _start(procs: list[subprocess.Popen[str]], code: str, *args: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_process_states(procs: list[subprocess.Popen[str]]) -> None:
    p = _start(procs, PLAIN)
    assert process_state(p.pid) == "running"
    os.kill(p.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while process_state(p.pid) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process_state(p.pid) == "stopped"
    os.kill(p.pid, signal.SIGCONT)
    p.kill()
    p.wait(10)
    assert process_state(p.pid) == "exited" and process_state(None) == "exited"


def test_stacks_come_from_processes_that_catch_the_signal(
    procs: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    sdk = _start(procs, SDK_LIKE, str(tmp_path / "r0.stacks.txt"))
    plain = _start(procs, PLAIN)
    assert catches(sdk.pid, STACK_SIGNAL) and not catches(plain.pid, STACK_SIGNAL)
    sent: list[int] = []

    def signal_rank(rank: int, signum: int) -> None:
        sent.append(rank)
        os.kill(sdk.pid, signum)

    stacks = request_stacks({0: (sdk.pid, tmp_path / "r0.stacks.txt")}, signal_rank,
                            timeout_s=5.0, use_py_spy=False)
    assert sent == [0] and "waiting_in_a_collective" in stacks[0]
    assert sdk.poll() is None and plain.poll() is None  # nobody was killed


def test_a_rank_that_does_not_answer_is_left_out(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    stacks = request_stacks({3: (None, tmp_path / "r3.stacks.txt")}, lambda r, s: None,
                            timeout_s=1.0, sleep=sleep, clock=lambda: now[0], use_py_spy=False)
    assert stacks == {} and now[0] >= 1.0
