"""One convention for durations and years on the whole command line (issue #28): every duration
option takes seconds or a number with a unit through one parser and says so in its help; every
`--year` has the same range."""

from __future__ import annotations

import math
from typing import Any

import pytest
import typer.main
from typer._click.exceptions import BadParameter

from trainguard.cli.main import app
from trainguard.cli.options import DURATION, YEAR, Duration, parse_year
from trainguard.timeparse import YEAR_MAX, YEAR_MIN, compact_duration, parse_duration

ROOT: Any = typer.main.get_command(app)


def _command(*path: str) -> Any:
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, cmd)]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        found += _walk(sub, (*path, name))
    return found


def _parser(param: Any) -> Any:
    return param.type_descriptor.parameter_info.parser


ALL = _walk(ROOT)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("0.5", 0.5), ("500ms", 0.5), ("30s", 30.0), ("5m", 300.0),
    ("1m30s", 90.0), ("6h", 21600.0), ("1d", 86400.0), (45.0, 45.0), (7, 7.0),
    ("1e-3", 0.001), (" 30s ", 30.0),
])
def test_a_duration_is_seconds_or_a_number_with_a_unit(text: str | float, seconds: float
                                                         ) -> None:
    assert Duration()(text) == seconds


@pytest.mark.parametrize("text", ["fast", "-1", "-1s", "5x", "", "inf", "nan", "5 m", "m",
                                  "1e9999"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        Duration()(text)


def test_bounds_and_whole_seconds() -> None:
    with pytest.raises(ValueError, match="shorter than 1s"):
        Duration(min_s=1)("500ms")
    with pytest.raises(ValueError, match="longer than 5s"):
        Duration(max_s=5)("1m")
    assert Duration(whole=True)("2m") == 120 and isinstance(Duration(whole=True)("2m"), int)
    with pytest.raises(ValueError, match="whole number"):
        Duration(whole=True)("1.5")


@pytest.mark.parametrize(("seconds", "spelled"), [
    (0.005, "5ms"), (0.5, "500ms"), (1.0, "1s"), (1.5, "1.5s"), (45.0, "45s"), (90.0, "90s"),
    (300.0, "5m"), (5400.0, "90m"), (21600.0, "6h"), (172800.0, "2d"), (86401.0, "86401s"),
])
def test_the_compact_spelling_reads_back_exactly(seconds: float, spelled: str) -> None:
    assert compact_duration(seconds) == spelled
    assert math.isclose(parse_duration(spelled, "x"), seconds, rel_tol=1e-12)


# --- on the command line -----------------------------------------------------------------------

REQUIRED = {"run": ["--nodes", "n1", "--", "true"], "check": ["--nodes", "n1"],
            "watch": ["--prometheus", "http://p"], "logs classify": ["x.log"],
            "detect": ["x.om"], "backtest": ["x.om"], "tune": ["x.om"]}


def _parsed(path: str, option: str, value: str) -> Any:
    args = [option, value, *REQUIRED.get(path, [])]
    if path == "run":  # options before the `--` that starts the command
        args = [*REQUIRED["run"][:2], option, value, *REQUIRED["run"][2:]]
    cmd = _command(*path.split())
    ctx = cmd.make_context(path, args)
    name = next(p.name for p in cmd.params if option in p.opts)
    return ctx.params[name]


@pytest.mark.parametrize(("path", "option"), [
    ("detect", "--step"), ("backtest", "--step"), ("tune", "--step"),
    ("watch", "--interval"), ("watch", "--history"), ("watch", "--step"),
    ("run", "--hang-timeout"), ("run", "--node-timeout"), ("run", "--backoff"),
    ("check", "--time-limit"), ("check", "--connect-timeout"), ("logs classify", "--window"),
])
def test_duration_options_take_seconds_and_units_alike(path: str, option: str) -> None:
    assert _parsed(path, option, "120") == 120
    assert _parsed(path, option, "2m") == 120
    assert _parsed(path, option, "1m30s") == 90


def test_every_seconds_option_is_a_duration() -> None:
    """An option whose help speaks of seconds (other than time stamps) uses the parser."""
    plain = []
    for path, cmd in ALL:
        for p in cmd.params:
            text = (getattr(p, "help", None) or "").lower()
            if ("seconds" in text and "unix seconds" not in text
                    and "seconds per" not in text and not isinstance(_parser(p), Duration)):
                plain.append((" ".join(path), p.opts))
    assert not plain


def test_duration_options_show_the_unit() -> None:
    found = 0
    for _path, cmd in ALL:
        for p in cmd.params:
            if isinstance(_parser(p), Duration):
                found += 1
                assert p.metavar == DURATION
                assert p.default is None or (isinstance(p.default, str)
                                             and p.default[-1] in "smhd"), (p.opts, p.default)
    assert found >= 20


def test_run_help_shows_defaults_with_units() -> None:
    from typer.testing import CliRunner

    out = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "300"}).stdout
    assert "[default: 5m]" in out and "[default: 15m]" in out  # --hang-timeout, --startup-timeout


def test_every_year_option_is_the_same() -> None:
    years = [(path, p) for path, cmd in ALL for p in cmd.params if "--year" in p.opts]
    assert {path for path, _ in years} >= {("backtest",), ("logs", "classify")}
    for _path, p in years:
        assert _parser(p) is parse_year and p.metavar == YEAR


@pytest.mark.parametrize("path", ["backtest", "logs classify"])
def test_years_out_of_range_are_refused_everywhere(path: str) -> None:
    assert _parsed(path, "--year", str(YEAR_MIN)) == YEAR_MIN
    for bad in (str(YEAR_MIN - 1), str(YEAR_MAX + 1), "soon"):
        with pytest.raises(BadParameter):
            _parsed(path, "--year", bad)
