"""Multi-host agents from the operator's side (issue 28), with real processes on this machine:
a launcher that fails (as ssh does when a host refuses) is reported once, with its own words
and its log, as one failed attempt; and ``--agent-exec manual`` prints each host's agent
command, which started by hand runs the job."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TG = [sys.executable, "-m", "trainguard.cli.main"]
REFUSED = "ssh: connect to host {node} port 22: Connection refused"


def test_a_failing_launcher_is_quoted_once_with_its_log_as_one_failed_attempt(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # What `ssh {node}` does for a host that refuses: one line on stderr, status 255; h2's
    # a second later (one failed launcher is not yet a lost host: the launch may be broken).
    launcher = f"sh -c '[ {{node}} = h2 ] && sleep 1; echo {REFUSED} >&2; exit 255'"
    out = subprocess.run(
        [*TG, "run", "--run-dir", str(run_dir), "--no-db", "--nodes", "h1,h2",
         "--agent-exec", launcher, "--controller-addr", "127.0.0.1", "--", "true"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    said = out.stdout + out.stderr
    assert said.count("Connection refused") == 2, said  # h1's and h2's, in one message
    assert said.count("no agent connected") == 1, said
    for node in ("h1", "h2"):
        log = run_dir / "attempts" / "0" / "agents" / f"agent-{node}.log"
        assert (f'{node}: launcher exited with status 255: "{REFUSED.format(node=node)}" '
                f"(log: {log})") in said
        assert REFUSED.format(node=node) in log.read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(a["index"], a["status"], a["failure"]["kind"]) for a in summary["attempts"]] \
        == [(0, "failed", "launch")]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("trainguard: ")]
    assert lines[0] == "trainguard: attempt 0: launching 2 rank(s) on h1, h2"
    assert lines[-1].startswith("trainguard: job failed after 1 attempt: launch failed: ")
    assert len(lines) == 2, lines  # nothing said twice, no "while stopping"


def _agent_commands(text: str) -> list[list[str]]:
    return [shlex.split(ln) for ln in text.splitlines() if ln.startswith("  trainguard agent ")]


def test_manual_agents_started_from_the_printed_commands_run_the_job(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        run = subprocess.Popen(
            [*TG, "run", "--run-dir", str(run_dir), "--no-db", "--nodes", "h1,h2",
             "--agent-exec", "manual", "--controller-addr", "127.0.0.1", "--",
             sys.executable, "-c", "import os; print('ran on', os.environ['TRAINGUARD_NODE'])"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    started: list[list[str]] = []
    agents: list[subprocess.Popen[str]] = []
    try:
        deadline = time.monotonic() + 120
        while run.poll() is None and time.monotonic() < deadline:
            for argv in _agent_commands(log.read_text()):
                if argv not in started:  # as an operator would, on each host
                    started.append(argv)
                    assert argv[:2] == ["trainguard", "agent"]
                    agents.append(subprocess.Popen([*TG, *argv[1:]], stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT, text=True))
            time.sleep(0.1)
        assert run.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, log.read_text()
        outputs = [a.communicate(timeout=30)[0] for a in agents]
    finally:
        for proc in (run, *agents):
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert "[h1 r0] ran on h1" in text and "[h2 r1] ran on h2" in text
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    # The commands carry what the controller bound and its session, and a file for the secret.
    control = json.loads((run_dir / "control.json").read_text())
    first = [a for a in started if a[a.index("--attempt") + 1] == "0"]
    assert sorted(a[a.index("--node") + 1] for a in first) == ["h1", "h2"]
    for argv in started:
        assert argv[argv.index("--controller-addr") + 1] == f"127.0.0.1:{control['port']}"
        assert argv[argv.index("--session") + 1] == control["session"]
        assert argv[argv.index("--secret-file") + 1] == str(run_dir / "agent-secret")
    assert control["secret"] not in text
    assert (run_dir / "agent-secret").read_text().strip() == control["secret"]
    assert stat.S_IMODE(os.stat(run_dir / "agent-secret").st_mode) == 0o600
    # Each agent says once where it connected, and once that it is done.
    for argv, said in zip(started, outputs, strict=True):
        node, attempt = argv[argv.index("--node") + 1], argv[argv.index("--attempt") + 1]
        connected = re.findall(rf"agent of {node}: connected to controller "
                               rf"127\.0\.0\.1:{control['port']} \(session "
                               rf"{control['session']}, attempt {attempt}\)", said)
        # (on failure: the agent's words and what the controller said of each attempt)
        why = f"{said}\n--- run log ---\n{text[-3000:]}"
        assert len(connected) == 1, why
        assert said.count(f"agent of {node}: done, exit status 0") == 1, why
