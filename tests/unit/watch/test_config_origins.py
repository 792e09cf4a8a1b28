"""`trainguard watch`'s overrides: a flag that is given wins, even when it switches something off
(``--listen off``), a flag not given leaves the file's value; and a bad value's message names
where it came from: the flag, or the file and its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.valueorigin import InvalidValue, in_file, named
from trainguard.watch.config import FLAGS, KEYS, WatchConfig, load_config


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "watch.toml"
    path.write_text(text)
    return path


def test_a_given_none_switches_off_and_an_absent_key_keeps_the_file(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("t0ken")
    path = _file(tmp_path, f'[watch]\nprometheus = "http://p"\n[http]\nlisten = "0.0.0.0:9"\n'
                 f'token_file = "{tmp_path / "tok"}"\n')
    assert load_config(path, {}).listen == "0.0.0.0:9"
    assert load_config(path, {"listen": None}).listen is None
    assert load_config(None, {"prometheus": "http://p", "listen": None}).listen is None
    assert load_config(None, {"prometheus": "http://p"}).listen == WatchConfig("http://p").listen


# (field, bad value as a flag override, the same as the file's text)
BAD = [
    ("prometheus", "prom:9090", '[watch]\nprometheus = "prom:9090"\n'),
    ("interval_s", 0.0, '[watch]\nprometheus = "http://p"\ninterval = "0s"\n'),
    ("lag_s", -1.0, '[watch]\nprometheus = "http://p"\nlag = -1\n'),
    ("step_s", -30, '[watch]\nprometheus = "http://p"\nstep = -30\n'),
    ("listen", "nowhere", '[watch]\nprometheus = "http://p"\n[http]\nlisten = "nowhere"\n'),
    ("alertmanager_url", "am:9093",
     '[watch]\nprometheus = "http://p"\n[alertmanager]\nurl = "am:9093"\n'),
]


@pytest.mark.parametrize(("field", "value", "text"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_names_its_flag_or_its_file_and_key(
        tmp_path: Path, field: str, value: Any, text: str) -> None:
    base = {} if field == "prometheus" else {"prometheus": "http://p"}
    with pytest.raises(ConfigError) as from_flag:
        load_config(None, {**base, field: value})
    assert str(from_flag.value).startswith(f"{FLAGS[field]} must be")
    assert KEYS[field] not in str(from_flag.value)

    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as from_file:
        load_config(path, {})
    assert str(from_file.value).startswith(f"{path}: {KEYS[field]} ")


def test_a_flag_over_a_good_file_value_is_named_as_the_flag(tmp_path: Path) -> None:
    path = _file(tmp_path, '[watch]\nprometheus = "http://p"\ninterval = "30s"\n')
    with pytest.raises(ConfigError, match=r"^--interval must be > 0$"):
        load_config(path, {"interval_s": 0.0})


def test_every_flag_named_in_messages_is_a_watch_option() -> None:
    watch: Any = getattr(typer.main.get_command(app), "commands", {})["watch"]
    options = {o for p in watch.params for o in p.opts}
    assert set(FLAGS.values()) <= options
    assert set(FLAGS) <= set(KEYS) and set(KEYS) <= set(WatchConfig.__dataclass_fields__)


def test_named_keeps_an_error_from_elsewhere() -> None:
    exc = InvalidValue("x.y", "must be > 0")
    assert named(exc, {}) is exc
    assert str(named(exc, {"x.y": in_file("x.y", "f.toml")})) == "f.toml: x.y must be > 0"


def test_cli_names_the_flag_not_the_key(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["watch", "--prometheus", "prom:9090", "--once",
                                      "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "error: --prometheus must be an http(s):// URL, got 'prom:9090'" in result.stderr
    assert "watch.prometheus" not in result.stderr


@pytest.mark.parametrize("origin", ["flag", "file"])
def test_an_unusable_state_dir_names_its_flag_or_its_file(tmp_path: Path, origin: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "state"
    config = _file(tmp_path, f'[watch]\nprometheus = "http://p"\nstate_dir = "{bad}"\n')
    args = ["--state-dir", str(bad)] if origin == "flag" else ["--config", str(config)]
    result = CliRunner().invoke(app, ["watch", "--prometheus", "http://p", "--once",
                                      "--listen", "off", "--db", "none", *args])
    assert result.exit_code == 2, result.output
    named_as = "--state-dir" if origin == "flag" else f"{config}: watch.state_dir"
    assert f"error: {named_as} {bad}: cannot create it" in " ".join(result.stderr.split())
