"""Agents started by hand (issue 28): one name for the controller's address (the old one still
accepted, hidden), and ``--agent-exec manual``, which prints each host's command line with a
secret file instead of the secret."""

from __future__ import annotations

import io
import os
import shlex
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.agent.__main__ import main as agent_main
from trainguard.agent.backend import agent_argv, with_agents
from trainguard.agent.launch_local import LocalLauncher
from trainguard.agent.manual import (
    MANUAL_CONNECT_TIMEOUT_S,
    ManualLauncher,
    hand_command,
    write_secret,
)
from trainguard.agent.runner import EXIT_ORPHANED, done_line
from trainguard.agent.secret import SECRET_ENV
from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.recover.local import LocalBackend


@pytest.mark.parametrize("option", ["--controller-addr", "--controller"])
def test_the_agent_takes_the_controller_address_under_its_name_and_the_old_one(
        option: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A bad node name fails after the address was taken: the option itself was accepted.
    status = agent_main([option, "127.0.0.1:9", "--session", "s", "--node", "bad name"])
    assert status == 2
    assert capsys.readouterr().err.startswith("error: --node: ")


def test_the_agent_without_an_address_or_with_two_says_so_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_main(["--session", "s", "--node", "n1"]) == 2
    assert capsys.readouterr().err == ("error: missing option --controller-addr HOST:PORT (the "
                                       "address `trainguard run` listens on for agents)\n")
    assert agent_main(["--controller-addr", "127.0.0.1:9", "--controller", "127.0.0.1:8",
                       "--session", "s"]) == 2
    assert "old name of --controller-addr" in capsys.readouterr().err
    assert agent_main(["--controller-addr", "nohost", "--session", "s", "--node", "n1"]) == 2
    assert capsys.readouterr().err.startswith("error: --controller-addr: expected HOST:PORT")


def test_help_and_launched_agents_use_only_the_new_name() -> None:
    out = CliRunner().invoke(app, ["agent", "--help"], env={"COLUMNS": "200"}).output
    assert "--controller-addr" in out and "--controller " not in out
    argv = agent_argv("py", ("10.0.0.1", 4000), "n1", "sess", 2)
    assert argv[3:5] == ["--controller-addr", "10.0.0.1:4000"] and "--controller" not in argv


def test_hand_command_is_the_launched_one_with_a_secret_file() -> None:
    argv = agent_argv("/venv/bin/python", ("login1", 4000), "gpu 1", "sess", 3)
    line = hand_command(argv, Path("/runs/a b/agent-secret"))
    assert shlex.split(line) == ["trainguard", "agent", "--controller-addr", "login1:4000",
                                 "--node", "gpu 1", "--session", "sess", "--attempt", "3",
                                 "--secret-file", "/runs/a b/agent-secret"]
    with pytest.raises(ValueError):
        hand_command(["ssh", "n1", "true"], Path("s"))


def test_the_secret_file_is_private_and_never_a_followed_symlink(tmp_path: Path) -> None:
    path = tmp_path / "agent-secret"
    path.write_text("old")
    path.chmod(0o644)
    write_secret(path, "s3cret")
    assert path.read_text() == "s3cret\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    (tmp_path / "target").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    from trainguard.errors import LaunchError

    with pytest.raises(LaunchError, match="cannot write the agents' secret file"):
        write_secret(tmp_path / "link", "s3cret")
    assert (tmp_path / "target").read_text() == "keep"


def test_manual_mode_prints_one_command_per_host_and_never_the_secret(tmp_path: Path) -> None:
    out = io.StringIO()
    launcher = ManualLauncher(tmp_path / "agent-secret", out=out)
    procs = launcher.start(("h1", "h2"), lambda node: agent_argv("py", ("10.0.0.1", 4000),
                                                                 node, "sess", 1),
                           {SECRET_ENV: "s3cret", "PATH": "/bin"}, tmp_path / "logs", 1)
    text = out.getvalue()
    header, *commands = text.splitlines()
    assert header.startswith("trainguard: attempt 1: start one agent per host")
    assert [shlex.split(c)[4:6] for c in commands] == [["--node", "h1"], ["--node", "h2"]]
    assert all(shlex.split(c)[-2:] == ["--secret-file", str(tmp_path / "agent-secret")]
               for c in commands)
    assert "s3cret" not in text and (tmp_path / "agent-secret").read_text() == "s3cret\n"
    assert procs.exited() == {}
    assert launcher.master_addr(("h1", "h2")) == "h1"


def test_with_agents_manual_waits_longer_and_other_templates_need_node(
        tmp_path: Path) -> None:
    backend = with_agents(LocalBackend(), agent_exec="manual", advertise="127.0.0.1",
                          secret_file=tmp_path / "s")
    assert isinstance(backend.launcher, ManualLauncher)
    assert backend.launcher.secret_file == tmp_path / "s"
    assert backend.connect_timeout_s == MANUAL_CONNECT_TIMEOUT_S
    with pytest.raises(ConfigError, match="or be `manual`"):
        LocalLauncher("ssh")
    default = with_agents(LocalBackend(), agent_exec="manual", advertise="127.0.0.1")
    assert isinstance(default.launcher, ManualLauncher)
    secret = default.launcher.secret_file
    try:
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    finally:
        os.unlink(secret)


def test_the_agents_done_line_says_why() -> None:
    assert done_line("h1", EXIT_ORPHANED) == ("agent of h1: done, exit status 3 (gave up on "
                                              "an unreachable controller)")
    assert done_line("h1", 9) == "agent of h1: done, exit status 9"
