"""The detector config file: round trip, validation, and alerts carrying calibrated rates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trainguard.detect.alerts import AlertEpisode, AlertKind
from trainguard.detect.calibration import (
    Calibration,
    DetectorFile,
    KindRate,
    annotate,
    detector_file,
    dumps,
    kind_rates,
    load,
    loads,
    poisson_upper95,
)
from trainguard.detect.config import DetectorConfig
from trainguard.errors import ConfigError

CAL = Calibration(per_nodes=64, budget_fp_per_day=0.3, n_nodes=16,
                  tune_span=(1000.0, 87400.0), heldout_span=(87400.0, 173800.0),
                  kinds=(KindRate("predictive", 2, 0.25, 0.8), KindRate("hard", 0, 0.0, 0.37)))
TUNED = DetectorConfig(score_on=13.5, score_off=6.0, persist_blocks=3, persist_gauge_blocks=18,
                       cooldown_s=3600.0)


def test_round_trip_keeps_config_and_calibration() -> None:
    f = DetectorFile(TUNED, CAL)
    text = dumps(f, ("written by a test",))
    assert text.startswith("# written by a test\n[detect]\n")
    assert loads(text, "x.toml") == f


def test_round_trip_without_calibration() -> None:
    f = DetectorFile(TUNED)
    assert loads(dumps(f), "x.toml") == f


def test_memory_limit_is_not_written_and_comes_from_the_command_line(tmp_path: Path) -> None:
    text = dumps(DetectorFile(replace(TUNED, max_memory_bytes=123)))
    assert "max_memory_bytes" not in text
    p = tmp_path / "d.toml"
    p.write_text(text)
    got = detector_file(p, 456)
    assert got.detect == replace(TUNED, max_memory_bytes=456)
    assert detector_file(None, 789).detect == DetectorConfig(max_memory_bytes=789)


def test_the_watch_style_detect_table_alone_is_enough() -> None:
    f = loads("[detect]\nscore_on = 12\npersist_blocks = 6\n", "w.toml")
    assert f.detect == DetectorConfig(score_on=12.0, persist_blocks=6)
    assert isinstance(f.detect.score_on, float)
    assert f.calibration is None


@pytest.mark.parametrize(("text", "match"), [
    ("[detect]\nscore_onn = 3\n", r"unknown key\(s\): score_onn"),
    ("[detect]\nscore_on = 'high'\n", "detect.score_on must be a number"),
    ("[detect]\npersist_blocks = 2.5\n", "detect.persist_blocks must be an integer"),
    ("[detect]\npersist_blocks = true\n", "detect.persist_blocks must be an integer"),
    ("[detect]\nscore_on = nan\n", "detect.score_on must be a number"),
    ("[detect]\nscore_on = 2.0\nscore_off = 3.0\n", "score_off must be <= detect.score_on"),
    ("[detect]\nblock_s = -5\n", "detect.block_s must be >= 0"),
    ("[detector]\n", r"unknown section\(s\): detector"),
    ("[calibration]\nper_nodes = 64\n", r"no \[detect\] table"),
    ("detect = 3\n", "detect must be a table"),
    ("[detect\n", "not valid TOML"),
    ("[detect]\n[calibration]\nper_nodes = 64\n", "calibration.n_nodes is missing"),
])
def test_bad_files_name_the_problem(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        loads(text, "bad.toml")


def test_bad_calibration_values() -> None:
    text = dumps(DetectorFile(TUNED, CAL))
    with pytest.raises(ConfigError, match=r"calibration\.fp_per_day must be a non-negative"):
        loads(text.replace("fp_per_day = 0.25", "fp_per_day = -1.0"), "c.toml")
    with pytest.raises(ConfigError, match=r"\[calibration.hard\] unknown key\(s\): extra"):
        loads(text + "extra = 1\n", "c.toml")


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        load(tmp_path)
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe[detect]")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load(bad)


def _ep(kind: AlertKind) -> AlertEpisode:
    return AlertEpisode("n1", 10.0, 20.0, 12.0, kind, ())


def test_annotate_adds_each_kinds_rate_and_nothing_without_calibration() -> None:
    pred, hard = annotate([_ep(AlertKind.PREDICTIVE), _ep(AlertKind.HARD)], CAL)
    assert pred.expected_fp_per_day == 0.25 and hard.expected_fp_per_day == 0.0
    assert pred.to_dict()["expected_fp_per_day"] == 0.25
    assert pred.to_dict()["expected_fp_per_nodes"] == 64
    plain = annotate([_ep(AlertKind.PREDICTIVE)], None)[0]
    assert plain.expected_fp_per_day is None
    assert "expected_fp_per_day" not in plain.to_dict()


def test_kind_rates_scale_to_the_budget_cluster() -> None:
    fps = [_ep(AlertKind.PREDICTIVE), _ep(AlertKind.PREDICTIVE), _ep(AlertKind.HARD)]
    rates = {r.kind: r for r in kind_rates(fps, days=2.0, n_nodes=16, per_nodes=64)}
    assert rates["predictive"].fp_per_day == pytest.approx(2 * 4 / 2)
    assert rates["hard"].fp_per_day == pytest.approx(1 * 4 / 2)
    assert rates["hard"].fp_per_day_upper95 > rates["hard"].fp_per_day


@pytest.mark.parametrize(("k", "exact"), [(0, 2.996), (1, 4.744), (5, 10.513), (20, 29.062)])
def test_poisson_upper_bound_is_close_to_the_exact_one(k: int, exact: float) -> None:
    assert poisson_upper95(k) == pytest.approx(exact, rel=0.01)
