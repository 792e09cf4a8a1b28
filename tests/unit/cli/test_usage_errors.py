"""Usage errors (unknown option or command, missing argument, bad value) are one line on
stderr, naming the command and where its help is, with exit status 2: not typer's framed
panel (issue #28)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app

CASES = [
    (["run", "--foo"], "trainguard run", "no such option: --foo"),
    (["watch", "--prometheus", "http://p", "--bogus", "1"], "trainguard watch",
     "no such option: --bogus"),
    (["--bogus"], "trainguard", "no such option: --bogus"),
    (["bogus"], "trainguard", "no such command 'bogus'"),
    (["logs", "classify"], "trainguard logs classify", "missing argument"),
    (["xid", "explain"], "trainguard xid explain", "missing argument"),
    (["detect", "x.om", "--limit", "many"], "trainguard detect", "--limit: "),
    (["watch", "--interval", "fast"], "trainguard watch",
     "--interval 'fast' is not a duration"),
    (["backtest", "x.om", "--year", "1969"], "trainguard backtest", "--year '1969'"),
    (["check"], "trainguard check", "missing option '--nodes'"),
]


@pytest.mark.parametrize(("args", "command", "says"), CASES, ids=lambda c: str(c))
def test_a_usage_error_is_one_line(args: list[str], command: str, says: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {command}: ")
    assert says in lines[0]
    assert lines[0].endswith(f"(see {command} --help)")


def test_a_group_without_a_command_still_shows_its_help() -> None:
    result = CliRunner().invoke(app, ["logs"])
    assert result.exit_code == 2
    assert "Usage:" in result.output and "classify" in result.output
