"""`trainguard run` on the local backend with real processes, signals and files.

The job here does not import the SDK: the supervisor still sees exits, output progress (hangs)
and the watched kernel logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.store import Store

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "plain_job.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]


def tg_run(tmp_path: Path, *opts: str, steps: int = 20, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [*TG, "run", "--run-dir", str(tmp_path / "run"), "--db", str(tmp_path / "tg.db"),
           "--backoff", "0.2", *opts, "--", sys.executable, str(SCRIPT), str(steps)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=tmp_path)


def summary(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "run" / "summary.json").read_text())  # type: ignore[no-any-return]


# A fault fired by time (`after=1`) must land while the job still runs, also where the
# controller stalls for seconds (CI twice saw a job of 2 s, then of 6 s, end before the XID was
# due; a stalled controller now says the drill did not fire). The first attempt runs up to 60 s,
# ended by the fault; the next ones run the steps asked.
A_TIMED_FAULT_LANDS = {"PLAIN_FIRST_ATTEMPT_STEPS": "600"}


def attempts_said(s: dict[str, Any], stderr: str) -> str:
    """Each attempt's status, category and reason, and the run's own lines (``stderr``): what
    a failed assertion should show."""
    said = [(a["status"], a.get("failure_category"), a.get("reason")) for a in s["attempts"]]
    return f"{said}\n{stderr}"


def pids_gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


def start_run(tmp_path: Path, *opts: str, steps: int = 200,
              env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], list[int]]:
    """Start `trainguard run` in the background; returns it and the first attempt's rank PIDs."""
    cmd = [*TG, "run", "--run-dir", str(tmp_path / "run"), "--db", str(tmp_path / "tg.db"),
           "--backoff", "0.2", "-q", *opts, "--", sys.executable, str(SCRIPT), str(steps)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env={**os.environ, "PLAIN_CKPT": str(tmp_path / "c"),
                                               **(env or {})})
    state_file = tmp_path / "run" / "state.json"
    deadline = time.monotonic() + 30
    while not (state_file.exists() and json.loads(state_file.read_text()).get("ranks")):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError(f"run did not start: {proc.communicate()[1]}")
        time.sleep(0.05)
    return proc, [r["pid"] for r in json.loads(state_file.read_text())["ranks"]]


def tg_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TG, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_fault_free_run_gets_the_torch_environment(tmp_path: Path) -> None:
    env_out = tmp_path / "env.json"
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3", "--nproc-per-node", "2",
               steps=3, env={"PLAIN_ENV_OUT": str(env_out)})
    assert r.returncode == 0, r.stderr
    env = json.loads(env_out.read_text())
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    assert env["TRAINGUARD_NODE"] == "node1" and env["TRAINGUARD_ATTEMPT"] == "0"
    s = summary(tmp_path)
    assert s["status"] == "succeeded" and len(s["attempts"]) == 1
    a = s["attempts"][0]
    assert a["nodes"] == ["node1", "node2"] and a["exit_codes"] == {str(r): 0 for r in range(4)}
    assert a["failure_category"] is None and a["decision"] is None and a["excluded_nodes"] == []
    assert "[node2 r3] rank 3 done" in r.stdout
    for node in ("node1", "node2", "node3"):
        assert (tmp_path / "run" / "nodes" / node / "kern.log").exists()
    with Store.open(str(tmp_path / "tg.db")) as store:
        (session,) = store.sessions()
        assert session.status == "succeeded" and session.backend == "local"
        (att,) = store.attempts(session.id)
        assert att.status == "succeeded" and att.nodes == ("node1", "node2")


def test_sigkill_of_a_rank_is_retried_and_the_job_resumes(tmp_path: Path) -> None:
    # Rank 0 saves every 5 steps (0.5 s); the kill comes 3 s after launch, so on a loaded
    # 2-core machine a slow start-up still leaves a checkpoint to resume from.
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--nproc-per-node", "2",
               "--inject", "kill:rank=3,after=3", steps=60,
               env={"PLAIN_CKPT": str(tmp_path / "ckpt.json")})
    assert r.returncode == 0, r.stderr
    first, last = summary(tmp_path)["attempts"]
    assert first["exit_codes"]["3"] == -signal.SIGKILL
    assert first["failure"]["culprit_rank"] == 3 and first["failure"]["culprit_nodes"] == ["node2"]
    assert first["decision"] == "retry" and last["status"] == "succeeded"
    # the supervisor's own kill is named as such, not as a crash of unknown cause
    what = "injected kill of rank 3 (--inject kill:rank=3,after=3)"
    assert first["failure_category"] == "injected_fault" and first["failure"]["injected"] == what
    assert first["failure"]["implication"] == "none" and f"{what}; no node is implicated" in \
        first["reason"]
    assert f"rank 3 on node2: {what}" in r.stderr and "cause unknown" not in r.stderr
    # the retry starts where the checkpoint says, not at step 0
    saved = json.loads((tmp_path / "ckpt.json").read_text())["step"]
    resumed = (tmp_path / "run/attempts/1/node1/rank0.log").read_text().splitlines()
    assert saved == 60 and resumed[0] != "rank 0 step 0", resumed[:2]
    assert resumed[0].startswith("rank 0 step ") and int(resumed[0].split()[-1]) % 5 == 0


def test_xid_in_a_kernel_log_excludes_the_node_and_uses_the_spare(
        tmp_path: Path, reap: list[subprocess.Popen[str]]) -> None:
    proc, pids = start_run(tmp_path, "--nodes", "node1,node2,node3", "--spares", "node4",
                           "--nproc-per-node", "2", steps=40)
    reap.append(proc)
    time.sleep(0.5)
    # What a real driver would log, appended the way syslog does.
    with open(tmp_path / "run" / "nodes" / "node2" / "kern.log", "a") as f:
        f.write("Nov 21 10:00:01 gpu-node02 kernel: [ 8812.123456] NVRM: Xid (PCI:0000:3b:00): "
                "79, pid=4242, name=python, GPU has fallen off the bus.\n")
    _out, errs = proc.communicate(timeout=120)
    assert proc.returncode == 0, errs
    assert pids_gone(pids)
    s = summary(tmp_path)
    first, last = s["attempts"][0], s["attempts"][-1]
    assert first["failure_category"] == "gpu_hardware"
    assert first["decision"] == "exclude_and_retry" and first["excluded_nodes"] == ["node2"]
    assert last["nodes"] == ["node1", "node4", "node3"] and last["status"] == "succeeded"
    assert [e["node"] for e in s["exclusions"]] == ["node2"]
    assert "Xid" in first["failure"]["evidence"][0]


def test_an_xid_logged_as_its_rank_dies_of_it_still_blames_the_node(tmp_path: Path) -> None:
    """The rank's exit reaches the controller before its host's kernel log is read again; the
    attempt's end takes each agent's last look, so the XID, not the crash, decides."""
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3", "--nproc-per-node", "1",
               steps=20, env={"PLAIN_CKPT": str(tmp_path / "c"), "PLAIN_FAIL": "xid_then_exit",
                              "PLAIN_XID_LOG": str(tmp_path / "run/nodes/node2/kern.log")})
    assert r.returncode == 0, r.stderr
    s = summary(tmp_path)
    first, last = s["attempts"][0], s["attempts"][-1]
    assert first["exit_codes"]["1"] == 1, attempts_said(s, r.stderr)
    assert first["failure_category"] == "gpu_hardware", attempts_said(s, r.stderr)
    assert first["excluded_nodes"] == ["node2"] and last["nodes"] == ["node1", "node3"]


def test_user_code_error_on_every_rank_stops_after_two_attempts(tmp_path: Path) -> None:
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3", "--nproc-per-node", "2",
               env={"PLAIN_FAIL": "every_rank"})
    assert r.returncode == 1
    assert "ValueError: bad hyperparameter" in r.stderr.splitlines()[-1]
    s = summary(tmp_path)
    assert s["status"] == "failed" and len(s["attempts"]) == 2
    assert [a["decision"] for a in s["attempts"]] == ["retry", "stop"]
    assert all(a["failure_category"] == "user_code_error" for a in s["attempts"])
    assert s["exclusions"] == []


def test_a_hang_is_detected_within_the_timeout(tmp_path: Path) -> None:
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--nproc-per-node", "1",
               "--hang-timeout", "2", "--inject", "hang:rank=1,after=1",
               env={"PLAIN_CKPT": str(tmp_path / "c"), **A_TIMED_FAULT_LANDS})
    assert r.returncode == 0, r.stderr
    s = summary(tmp_path)
    first = s["attempts"][0]
    assert first["failure_category"] == "injected_fault", attempts_said(s, r.stderr)
    assert first["failure"]["culprit_rank"] == 1 and "SIGSTOP" in first["failure"]["summary"]
    assert "injected hang of rank 1" in first["failure"]["summary"]
    assert first["failure"]["implicated_nodes"] == [] and "no node is implicated" in \
        first["reason"]
    # stopped at ~1 s after launch; declared after 2 s of silence (+ poll), torn down at once
    assert first["duration_s"] < 1 + 2 + 5


def test_ctrl_c_stops_every_rank_and_records_the_attempt_as_cancelled(
        tmp_path: Path, reap: list[subprocess.Popen[str]]) -> None:
    proc, pids = start_run(tmp_path, "--nodes", "node1,node2", "--nproc-per-node", "2",
                           steps=1000)
    reap.append(proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert pids_gone(pids)
    s = summary(tmp_path)
    assert s["status"] == "cancelled" and s["attempts"][0]["status"] == "cancelled"
    with Store.open(str(tmp_path / "tg.db")) as store:
        (session,) = store.sessions()
        assert session.status == "cancelled"
        assert store.attempts(session.id)[0].status == "cancelled"


def test_killing_the_supervisor_leaves_no_orphans(
        tmp_path: Path, reap: list[subprocess.Popen[str]]) -> None:
    proc, pids = start_run(tmp_path, "--nodes", "a", "--nproc-per-node", "2", steps=1000)
    reap.append(proc)
    proc.kill()
    proc.wait()
    assert pids_gone(pids)


@pytest.mark.parametrize(("opts", "message", "code"), [
    (["--nodes", "a", "--", "/nonexistent/train"], "command not found", 2),
    (["--nodes", "a", "--", "no-such-program-xyz"], "command not found on PATH", 2),
    (["--nodes", " , ", "--", "true"], "--nodes", 2),
    (["--", "true"], "--nodes is empty", 2),
    (["--nodes", "a"], "no command", 2),
    (["--nodes", "a", "--nproc-per-node", "64", "--slots-per-node", "8", "--", "true"],
     "more than a local node holds", 2),
    (["--nodes", "a", "--inject", "explode:rank=1", "--", "true"], "unknown", 2),
    (["--nodes", "a", "--inject", "kill:rank=5", "--", "true"], "names rank 5", 2),
    (["--nodes", "a", "--no-agents", "--preflight", "--", "true"], "need agents", 2),
    (["--nodes", "a", "--check-floors", "f.toml", "--", "true"], "needs --preflight", 2),
])
def test_bad_input_is_one_clear_error_before_launch(tmp_path: Path, opts: list[str],
                                                    message: str, code: int) -> None:
    r = subprocess.run([*TG, "run", "--run-dir", str(tmp_path / "run"), "--no-db", *opts],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "attempts").exists()


def test_unwritable_run_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = subprocess.run([*TG, "run", "--run-dir", str(blocker / "run"), "--no-db", "--nodes", "a",
                        "--", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not writable" in r.stderr and "Traceback" not in r.stderr


def test_a_run_dir_is_not_reused_by_accident(tmp_path: Path) -> None:
    assert tg_run(tmp_path, "--nodes", "a", steps=1).returncode == 0
    again = tg_run(tmp_path, "--nodes", "a", steps=1)
    assert again.returncode == 2 and "--overwrite" in again.stderr
    assert tg_run(tmp_path, "--nodes", "a", "--overwrite", steps=1).returncode == 0


def test_trainguard_inject_on_a_running_job(tmp_path: Path,
                                            reap: list[subprocess.Popen[str]]) -> None:
    # 100 steps of 0.1 s: attempt 1 (resumed from a checkpoint a few steps in) runs for about
    # 9 s, far longer than the `inject xid` command below takes to start on a loaded machine.
    # With 40 steps it could finish first (CI stop 51: two attempts, not three).
    proc, pids = start_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3",
                           "--nproc-per-node", "1", steps=100)
    reap.append(proc)
    time.sleep(0.5)
    r = tg_cli("inject", "kill", "--run-dir", str(tmp_path / "run"), "--rank", "1")
    assert r.returncode == 0 and f"pid {pids[1]}" in r.stderr
    assert "inject: looking for the run" in r.stderr and "send SIGKILL to rank 1" in r.stderr
    # The relaunch gets new PIDs; wait for them, then an XID on node2 moves the job to node3.
    state_file = tmp_path / "run" / "state.json"
    deadline = time.monotonic() + 30
    while json.loads(state_file.read_text()).get("attempt") != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    r = tg_cli("inject", "xid", "--run-dir", str(tmp_path / "run"), "--node", "node2",
               "--xid", "48")
    assert r.returncode == 0, r.stderr
    _, errs = proc.communicate(timeout=120)
    assert proc.returncode == 0, errs
    attempts = summary(tmp_path)["attempts"]
    assert len(attempts) == 3, attempts_said(summary(tmp_path), errs)
    a0, a1, a2 = attempts
    assert a0["exit_codes"]["1"] == -signal.SIGKILL and a0["decision"] == "retry"
    assert a0["failure_category"] == "injected_fault"
    assert "injected kill of rank 1 (trainguard inject)" in a0["reason"]
    assert a1["failure_category"] == "gpu_memory_ecc" and a1["excluded_nodes"] == ["node2"]
    assert a2["nodes"] == ["node1", "node3"] and a2["status"] == "succeeded"


def test_inject_errors_are_one_line(tmp_path: Path) -> None:
    r = tg_cli("inject", "kill", "--run-dir", str(tmp_path), "--rank", "0")
    assert r.returncode == 2 and "state.json does not exist" in r.stderr
    r = tg_cli("inject", "corrupt-checkpoint", str(tmp_path))
    assert r.returncode == 2 and "no checkpoint" in r.stderr


def test_a_hard_detector_alert_stops_the_attempt_and_excludes_the_node(
        tmp_path: Path, reap: list[subprocess.Popen[str]]) -> None:
    alerts = tmp_path / "alerts.jsonl"
    old = {"node": "node2", "start": 1.0, "end": 2.0, "peak_score": 50.0, "kind": "hard",
           "signals": [], "source": "trainguard"}
    alerts.write_text(json.dumps(old) + "\n")  # history from before the run: ignored
    proc, _ = start_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3",
                        "--nproc-per-node", "1", "--alerts", str(alerts), steps=40)
    reap.append(proc)
    time.sleep(1.0)
    predictive = {**old, "kind": "predictive", "start": time.time(),
                  "signals": [{"metric": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "deviation": 9.1}]}
    with open(alerts, "a") as f:
        f.write(json.dumps(predictive) + "\n")
    time.sleep(1.0)
    assert proc.poll() is None  # a predictive alert alone does not stop the job
    with open(alerts, "a") as f:
        f.write(json.dumps({**old, "start": time.time(), "signals": [
            {"metric": "DCGM_FI_DEV_XID_ERRORS", "gpu": "3", "deviation": 79.0}]}) + "\n")
    _, errs = proc.communicate(timeout=120)
    assert proc.returncode == 0, errs
    first, last = summary(tmp_path)["attempts"]
    assert first["failure"]["kind"] == "node" and first["excluded_nodes"] == ["node2"]
    assert "detector hard alert" in first["failure"]["summary"]
    assert first["failure"]["summary"].endswith("on node2")
    assert last["nodes"] == ["node1", "node3"]
    with Store.open(str(tmp_path / "tg.db")) as store:
        sigs = {e.signature for e in store.events()}
        assert "detector_alert" in sigs


def test_an_alert_in_the_store_is_acted_on(tmp_path: Path,
                                           reap: list[subprocess.Popen[str]]) -> None:
    proc, _ = start_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3",
                        "--nproc-per-node", "1", steps=40)
    reap.append(proc)
    time.sleep(0.5)
    with Store.open(str(tmp_path / "tg.db")) as store:  # e.g. written by `trainguard watch`
        store.add_alert(node="node1", start=time.time(), end=None, peak_score=30.0, kind="hard",
                        signals=[{"metric": "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gpu": "1",
                                  "deviation": 1.0}], source="detector")
    _, errs = proc.communicate(timeout=120)
    assert proc.returncode == 0, errs
    first, last = summary(tmp_path)["attempts"]
    assert first["excluded_nodes"] == ["node1"] and last["nodes"] == ["node3", "node2"]


def test_an_xid_logged_just_before_the_run_still_counts(tmp_path: Path) -> None:
    klog = tmp_path / "run" / "nodes" / "node2" / "kern.log"
    klog.parent.mkdir(parents=True)
    klog.write_text("[ 8812.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, "
                    "GPU has fallen off the bus.\n")
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3", steps=5)
    assert r.returncode == 0, r.stderr
    first, last = summary(tmp_path)["attempts"]
    assert first["failure_category"] == "gpu_hardware" and first["excluded_nodes"] == ["node2"]
    assert last["nodes"] == ["node1", "node3"]


def test_old_kernel_log_history_is_ignored(tmp_path: Path) -> None:
    klog = tmp_path / "run" / "nodes" / "node2" / "kern.log"
    klog.parent.mkdir(parents=True)
    klog.write_text("2020-01-01T00:00:00+00:00 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                    "pid=1, name=python, GPU has fallen off the bus.\n")
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3", steps=5)
    assert r.returncode == 0, r.stderr
    assert len(summary(tmp_path)["attempts"]) == 1


def test_operator_exclusions_are_honoured_and_local_ones_end_with_the_session(
        tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "tg.db")) as store:
        store.add_exclusion("node1", reason="bad PSU", created=time.time(), source="operator")
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3,node4",
               "--inject", "xid:node=node2,after=1",
               env={"PLAIN_CKPT": str(tmp_path / "c"), **A_TIMED_FAULT_LANDS})
    assert r.returncode == 0, r.stderr
    assert "node1 is excluded (bad PSU); using spare node3" in r.stderr
    s = summary(tmp_path)
    assert s["attempts"][0]["nodes"] == ["node3", "node2"]
    assert s["attempts"][0]["excluded_nodes"] == ["node2"], attempts_said(s, r.stderr)
    assert s["attempts"][-1]["nodes"] == ["node3", "node4"]
    with Store.open(str(tmp_path / "tg.db")) as store:
        # the operator's exclusion stays; the virtual node2's ended with the session
        assert store.active_excluded_nodes() == {"node1"}
        assert [e.node for e in store.exclusions()] == ["node1", "node2"]


def test_an_injected_alert_replays_the_detectors_alert_for_the_node(tmp_path: Path) -> None:
    replay = tmp_path / "detector-alerts.jsonl"
    replay.write_text("\n".join(json.dumps(r) for r in (
        {"node": "node1", "start": 5.0, "end": 6.0, "peak_score": 9.0, "kind": "hard",
         "signals": [], "source": "static_rules"},
        {"node": "node2", "start": 1.0, "end": 2.0, "peak_score": 40.0, "kind": "predictive",
         "signals": [{"metric": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu": "3",
                      "deviation": 12.0}], "source": "trainguard"})) + "\n")
    r = tg_run(tmp_path, "--nodes", "node1,node2", "--spares", "node3",
               "--alerts", str(tmp_path / "live.jsonl"), "--alerts-replay", str(replay),
               "--stop-on-predictive", "--inject", "alert:node=node2,after=1",
               env={"PLAIN_CKPT": str(tmp_path / "c"), **A_TIMED_FAULT_LANDS})
    assert r.returncode == 0, r.stderr
    s = summary(tmp_path)
    assert len(s["attempts"]) == 2, attempts_said(s, r.stderr)
    first, last = s["attempts"]
    assert "detector predictive alert (DCGM_FI_DEV_ECC_SBE_VOL_TOTAL)" in \
        first["failure"]["summary"]
    assert first["excluded_nodes"] == ["node2"] and last["nodes"] == ["node1", "node3"]
    (live,) = [json.loads(x) for x in (tmp_path / "live.jsonl").read_text().splitlines()]
    assert live["node"] == "node2" and live["source"] == "replay of trainguard"


def test_an_alert_fault_needs_an_alerts_feed(tmp_path: Path) -> None:
    r = tg_run(tmp_path, "--nodes", "node1", "--inject", "alert:node=node1", steps=1)
    assert r.returncode == 2 and "needs --alerts FILE" in r.stderr
