"""`trainguard watch`'s configuration: TOML plus flags, each mistake one line naming the key;
and the CLI's own error paths (no traceback, exit 2 for bad options)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.watch.config import TimeMap, load_config


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "watch.toml"
    p.write_text(text)
    return p


def test_toml_and_flags_make_one_config(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("s3cret\n")
    path = _toml(tmp_path, f"""
[watch]
prometheus = "http://prom:9090"
interval = "1m30s"
history = "12h"
state_dir = "{tmp_path / 'st'}"
metrics = ["DCGM_FI_DEV_GPU_TEMP"]

[detect]
block_s = 60
warmup_s = 1800

[http]
listen = "0.0.0.0:9464"
token_file = "{tmp_path / 'tok'}"

[alertmanager]
url = "http://am:9093"

[actions]
enabled = true
max_nodes_per_hour = 1

[kernel_logs]
sources = ["node01=/var/log/kern.log"]

[replay]
speed = 60
""")
    cfg = load_config(path, {"interval_s": 10.0})  # history not given: the file's
    assert cfg.interval_s == 10.0 and cfg.history_s == 12 * 3600
    assert cfg.detect.block_s == 60 and cfg.detect.warmup_s == 1800
    assert cfg.token == "s3cret" and cfg.listen == "0.0.0.0:9464"
    assert cfg.alertmanager_url == "http://am:9093"
    assert cfg.actions.enabled and cfg.actions.dry_run and cfg.actions.max_nodes_per_hour == 1
    assert cfg.kernel_logs == ("node01=/var/log/kern.log",)
    assert cfg.metrics == ("DCGM_FI_DEV_GPU_TEMP",)
    assert cfg.replay == TimeMap(speed=60)


@pytest.mark.parametrize(("text", "match"), [
    ("[watch]\nprometheus = 'prom:9090'\n", "watch.prometheus must be an http"),
    ("[watch]\nprometheus = 'http://p'\ninterval = 'soon'\n", "watch.interval 'soon'"),
    ("[watch]\nprometheus = 'http://p'\nbogus = 1\n", r"\[watch\] unknown key: bogus"),
    ("[detect]\nscore_on = -1\n[watch]\nprometheus = 'http://p'\n", "detect.score_on"),
    ("[detect]\nnot_a_knob = 1\n[watch]\nprometheus = 'http://p'\n", "not_a_knob"),
    ("[actions]\nmax_pool_fraction = 2\n[watch]\nprometheus = 'http://p'\n",
     "actions.max_pool_fraction"),
    ("[wach]\n", "unknown section"),
    ("[watch\n", "not valid TOML"),
    ("[watch]\nprometheus = 'http://p'\n[http]\ntoken_file = '/nonexistent/tok'\n",
     "http.token_file"),
    ("", "give --prometheus"),
])
def test_config_mistakes_are_one_clear_error(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(_toml(tmp_path, text), {})


runner = CliRunner()


def test_cli_bad_options_exit_2_without_traceback(tmp_path: Path) -> None:
    for args, message in [
        (["watch"], "give --prometheus"),
        (["watch", "--prometheus", "http://p", "--interval", "fast"], "--interval 'fast'"),
        (["watch", "--prometheus", "http://p", "--actions", "maybe"], "--actions must be"),
        (["watch", "--prometheus", "http://p", "--listen", "0.0.0.0:0",
          "--state-dir", str(tmp_path / "s"), "--db", "none", "--once"], "token"),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_cli_once_against_an_unreachable_prometheus_is_bad_input_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `detect` says of the same URL: exit 2, one line, no step it could not read, no
    ./trainguard.db for a round that named no store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINGUARD_DB", raising=False)
    result = runner.invoke(app, ["watch", "--prometheus", "http://127.0.0.1:9", "--once",
                                 "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "error: watch: cannot reach Prometheus at http://127.0.0.1:9"), result.output
    assert "step" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # the state dir, no store


def test_tunes_output_given_as_config_says_to_use_detector_config(tmp_path: Path) -> None:
    """`trainguard tune`'s file has a [calibration] table: as --config it is refused with the
    option that takes it, and that option does take it."""
    from trainguard.detect.calibration import Calibration, DetectorFile, KindRate, dumps
    from trainguard.detect.config import DetectorConfig

    cal = Calibration(64, 0.3, 16, (0.0, 1e5), (1e5, 2e5), (KindRate("hard", 0, 0.0, 0.7),))
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(dumps(DetectorFile(DetectorConfig(score_on=12.0), cal)))
    with pytest.raises(ConfigError, match=r"unknown section\(s\): calibration; .*"
                                          r"--detector-config FILE"):
        load_config(tuned, {"prometheus": "http://p"})
    result = runner.invoke(app, ["watch", "--prometheus", "http://p", "--actions", "maybe",
                                 "--detector-config", str(tuned)])
    # read without complaint (the next mistake reported is the --actions value)
    assert result.exit_code == 2 and "--actions must be" in result.output, result.output
    with pytest.raises(ConfigError, match=r"unknown section\(s\): wach$"):
        load_config(_toml(tmp_path, "[wach]\n"), {})
