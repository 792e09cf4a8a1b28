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
    days_for_bound,
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


def test_alerts_carry_the_upper_bound_of_their_kinds_rate() -> None:
    """Issue #28: a rate of 0.0 from a short held-out part said nothing of its 95% bound."""
    pred, hard = annotate([_ep(AlertKind.PREDICTIVE), _ep(AlertKind.HARD)], CAL)
    assert (pred.expected_fp_per_day_upper95, hard.expected_fp_per_day_upper95) == (0.8, 0.37)
    assert hard.to_dict()["expected_fp_per_day"] == 0.0
    assert hard.to_dict()["expected_fp_per_day_upper95"] == 0.37
    assert "expected_fp_per_day_upper95" not in annotate([_ep(AlertKind.HARD)], None)[0] \
        .to_dict()


def test_the_file_holds_the_overall_bound_and_the_cluster_size() -> None:
    cal = replace(CAL, gpus_per_node=8)
    text = dumps(DetectorFile(TUNED, cal))
    section = text.split("[calibration]")[1].split("[calibration.")[0]
    values = dict(line.split(" = ") for line in section.splitlines() if " = " in line)
    # the kinds' sum; the bound: 2 false alarms in 1 day of 16 nodes, per 64 nodes
    assert int(values["false_positives"]) == 2
    assert float(values["fp_per_day"]) == pytest.approx(0.25 + 0.0)
    assert float(values["fp_per_day_upper95"]) == pytest.approx(poisson_upper95(2) * 64 / 16)
    assert (int(values["n_nodes"]), int(values["gpus_per_node"])) == (16, 8)
    back = loads(text, "x.toml").calibration
    assert back == cal and back is not None and back.total().fp_per_day_upper95 == \
        pytest.approx(poisson_upper95(2) * 4)
    # a file written before the cluster size was recorded still reads
    old = text.replace("gpus_per_node = 8\n", "")
    assert loads(old, "x.toml").calibration == CAL
    with pytest.raises(ConfigError, match="gpus_per_node must be >= 1"):
        loads(text.replace("gpus_per_node = 8", "gpus_per_node = 0"), "x.toml")
    with pytest.raises(ConfigError, match=r"calibration\.fp_per_day_upper95 must be"):
        loads(text.replace(f"fp_per_day_upper95 = {values['fp_per_day_upper95']}",
                           "fp_per_day_upper95 = 'x'", 1), "x.toml")


def test_days_for_the_bound_to_fit_the_budget() -> None:
    need = days_for_bound(0.3, 16, 64)
    # zero false alarms over `need` days of 16 nodes bound the rate at the budget exactly
    assert poisson_upper95(0) * 64 / 16 / need == pytest.approx(0.3)
    assert days_for_bound(0.3, 64, 64) == pytest.approx(need / 4)
    assert days_for_bound(0.0, 16, 64) == float("inf")
