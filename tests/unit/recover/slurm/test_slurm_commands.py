"""SlurmCommands with a fake runner: argv lists, parsing of real outputs, errors."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.slurm import NodeInfo, SlurmCommands, parse_key_values
from trainguard.recover.slurm.commands import subprocess_runner

DATA = Path(__file__).resolve().parents[3] / "data" / "slurm"


class FakeRunner:
    """Records argv; answers with canned (stdout, stderr, returncode) per program or raises."""

    def __init__(self, stdout: str = "", stderr: str = "", returncode: int = 0,
                 raises: BaseException | None = None) -> None:
        self.calls: list[list[str]] = []
        self.stdout, self.stderr, self.returncode, self.raises = stdout, stderr, returncode, raises

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert isinstance(argv, list | tuple) and all(isinstance(a, str) for a in argv)
        self.calls.append(list(argv))
        if self.raises is not None:
            raise self.raises
        return subprocess.CompletedProcess(list(argv), self.returncode, self.stdout, self.stderr)


def commands(**kwargs: object) -> tuple[SlurmCommands, FakeRunner]:
    runner = FakeRunner(**kwargs)  # type: ignore[arg-type]
    return SlurmCommands(runner=runner), runner


def test_drain_passes_a_hostile_reason_as_one_sanitized_element() -> None:
    slurm, runner = commands()
    slurm.drain("node2", 'xid 79; rm -rf / $(reboot) "quoted"\nnext')
    assert runner.calls == [["scontrol", "update", "nodename=node2", "state=drain",
                             "reason=xid 79, rm -rf / (reboot) quoted next"]]


def test_resume() -> None:
    slurm, runner = commands()
    slurm.resume("gpu-017")
    assert runner.calls == [["scontrol", "update", "nodename=gpu-017", "state=resume"]]


@pytest.mark.parametrize("node", ["node1 state=down", "node1;reboot", "$(reboot)", "-h",
                                  "node[1-2]", "ALL,node2", ""])
def test_invalid_node_never_reaches_scontrol(node: str) -> None:
    slurm, runner = commands()
    with pytest.raises(ConfigError, match="invalid Slurm node name"):
        slurm.drain(node, "reason")
    with pytest.raises(ConfigError, match="invalid Slurm node name"):
        slurm.resume(node)
    assert runner.calls == []


def test_sinfo_nodes_parses_real_output() -> None:
    slurm, runner = commands(stdout=(DATA / "sinfo_nodes.txt").read_text())
    nodes = slurm.sinfo_nodes()
    assert runner.calls == [["sinfo", "-h", "-N", "-o", "%N|%T|%E"]]
    assert list(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node1"] == NodeInfo("node1", "idle", None)
    assert nodes["node4"] == NodeInfo("node4", "draining", "xid 79 gpu 3")
    assert nodes["node4"].drained and not nodes["node2"].drained
    assert all(n.responding for n in nodes.values())


def test_sinfo_nodes_reason_may_hold_the_delimiter_and_nodes_repeat_per_partition() -> None:
    text = "node1|drained|a|b c\nnode1|drained|a|b c\nnode2|down*|Not responding\n\n"
    slurm, _ = commands(stdout=text)
    nodes = slurm.sinfo_nodes()
    assert nodes == {"node1": NodeInfo("node1", "drained", "a|b c"),
                     "node2": NodeInfo("node2", "down*", "Not responding")}
    assert not nodes["node2"].responding


def test_sinfo_unexpected_line() -> None:
    slurm, _ = commands(stdout="garbage\n")
    with pytest.raises(LaunchError, match="sinfo: unexpected line"):
        slurm.sinfo_nodes()


def test_show_job_parses_real_output() -> None:
    lines = (DATA / "scontrol_show_job.txt").read_text().splitlines()
    slurm, runner = commands(stdout=lines[1] + "\n")
    job = slurm.show_job(2)
    assert runner.calls == [["scontrol", "show", "job", "-o", "2"]]
    assert job["JobId"] == "2"
    assert job["JobName"] == "fail-job"
    assert job["JobState"] == "FAILED"
    assert job["Reason"] == "NonZeroExitCode"
    assert job["ExitCode"] == "3:0"
    assert job["AllocNode:Sid"] == "localhost:29503"
    assert job["CPUs/Task"] == "1"
    assert job["TRES"] == "cpu=4,node=1,billing=4"
    assert job["Power"] == ""


def test_parse_key_values_keeps_spaces_inside_values() -> None:
    line = ("JobId=4 JobName=name with spaces JobState=PENDING Reason=ReqNodeNotAvail, "
            "UnavailableNodes:node4 Command=python train.py lr=3e-4 --x=1 "
            "WorkDir=/data/my runs TRES=cpu=8,node=2 Power=")
    assert parse_key_values(line) == {
        "JobId": "4",
        "JobName": "name with spaces",
        "JobState": "PENDING",
        "Reason": "ReqNodeNotAvail, UnavailableNodes:node4",
        "Command": "python train.py lr=3e-4 --x=1",
        "WorkDir": "/data/my runs",
        "TRES": "cpu=8,node=2",
        "Power": "",
    }


def test_show_job_without_output() -> None:
    slurm, _ = commands(stdout="\n")
    with pytest.raises(LaunchError, match="no output"):
        slurm.show_job("7")


@pytest.mark.parametrize("job_id", ["7; reboot", "-1", "abc", "", "1 2"])
def test_job_ids_are_validated(job_id: str) -> None:
    slurm, runner = commands()
    with pytest.raises(ConfigError, match="invalid Slurm job id"):
        slurm.cancel(job_id)
    assert runner.calls == []


@pytest.mark.parametrize("job_id", [12, "12", "12_3", "12+1"])
def test_cancel(job_id: int | str) -> None:
    slurm, runner = commands()
    slurm.cancel(job_id)
    assert runner.calls == [["scancel", str(job_id)]]


def test_nonzero_exit_names_the_command_and_first_stderr_line() -> None:
    slurm, _ = commands(returncode=1,
                        stderr="slurm_update error: Invalid node name specified\nmore\n")
    with pytest.raises(LaunchError, match=r"^scontrol update nodename=node9 state=resume "
                       r"failed \(exit 1\): slurm_update error: Invalid node name specified$"):
        slurm.resume("node9")


def test_reason_with_spaces_is_quoted_in_the_error_message() -> None:
    slurm, _ = commands(returncode=1, stderr="boom")
    with pytest.raises(LaunchError, match="'reason=xid 79' failed"):
        slurm.drain("node1", "xid 79")


def test_missing_tool() -> None:
    slurm, _ = commands(raises=FileNotFoundError(2, "No such file", "sinfo"))
    with pytest.raises(LaunchError, match="sinfo not found"):
        slurm.sinfo_nodes()


def test_timeout() -> None:
    slurm, _ = commands(raises=subprocess.TimeoutExpired(["sinfo"], 60))
    with pytest.raises(LaunchError, match="timed out after 60 s"):
        slurm.sinfo_nodes()


def test_hostnames_uses_scontrol() -> None:
    slurm, runner = commands(stdout="node1\nnode2\n")
    assert slurm.hostnames("node[1-2]") == ("node1", "node2")
    assert runner.calls == [["scontrol", "show", "hostnames", "node[1-2]"]]


def test_hostnames_falls_back_to_python_without_scontrol() -> None:
    slurm, _ = commands(raises=FileNotFoundError(2, "No such file", "scontrol"))
    assert slurm.hostnames("gpu[01-02]") == ("gpu01", "gpu02")


def test_hostnames_invalid_expression_despite_exit_0() -> None:
    # scontrol 22.05 exits 0 here (observed)
    slurm, _ = commands(stdout="Invalid hostlist: node[5-3]\n",
                        stderr="scontrol: error: _parse_single_range: Invalid range: `5-3'\n")
    with pytest.raises(ConfigError, match=r"invalid hostlist 'node\[5-3\]'"):
        slurm.hostnames("node[5-3]")


def test_show_config() -> None:
    text = ("Configuration data as of 2026-11-21T15:40:04\n"
            "AccountingStorageType   = accounting_storage/none\n"
            "JobCompLoc              = /tmp/x/jobcomp.txt\n"
            "JobCompType             = jobcomp/filetxt\n"
            "\nCgroup Support Configuration:\nAllowedKernelMemorySpace = (null)\n")
    slurm, _ = commands(stdout=text)
    config = slurm.show_config()
    assert config["JobCompLoc"] == "/tmp/x/jobcomp.txt"
    assert config["JobCompType"] == "jobcomp/filetxt"
    assert "Configuration data as of 2026-11-21T15:40:04" not in config


def test_sacct_and_squeue_argv() -> None:
    slurm, runner = commands()
    slurm.sacct(["JobID", "State"], since="2026-01-01")
    slurm.squeue_json()
    assert runner.calls == [
        ["sacct", "-P", "-n", "-X", "-D", "-S", "2026-01-01", "--format=JobID,State"],
        ["squeue", "-t", "all", "--json"],
    ]


def test_subprocess_runner_applies_env(tmp_path: Path) -> None:
    run = subprocess_runner({"SLURM_CONF": str(tmp_path / "slurm.conf")})
    proc = run(["sh", "-c", 'printf %s "$SLURM_CONF"'])
    assert proc.stdout == str(tmp_path / "slurm.conf")
