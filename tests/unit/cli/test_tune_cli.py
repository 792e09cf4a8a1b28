"""`trainguard tune` on a small held-out-generator cluster, and the config file it writes as
read by `detect --config` and `backtest --config`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from script_module import load_script
from typer.testing import CliRunner, Result

import trainguard.cli.tune as cli_tune
from trainguard.cli.main import app
from trainguard.detect.calibration import DetectorFile, days_for_bound, dumps, load
from trainguard.detect.config import DetectorConfig
from trainguard.detect.tune import BudgetUnreachable
from trainguard.detect.tune_early import EARLY_GROUPS, EARLY_KNOBS

runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _error(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 nodes x 4 GPUs x 1 day at 2 min, about 19 hardware failures (seed 3)."""
    gen = load_script("benchmarks/heldout/gen.py", "heldout_gen_tune")
    d = tmp_path_factory.mktemp("tune") / "ho"
    gen.generate(d, nodes=8, gpus=4, days=1.0, seed=3, interval_s=120, workers=1,
                 failure_rate=200.0)
    return d


PROGRESS: list[tuple[str, int, int, bool]] = []
"""What `tune` reported to the CLI's progress in the `tuned` run: (stage, done, total, bar)."""
STDERR: list[str] = []


class _Recording(cli_tune.TuneProgress):
    def __call__(self, stage: str, done: int, total: int) -> None:
        PROGRESS.append((stage, done, total, self.bar is not None))
        super().__call__(stage, done, total)


@pytest.fixture(scope="module")
def tuned(cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("tuned") / "detector.toml"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli_tune, "TuneProgress", _Recording)
        r = invoke("tune", str(cluster / "metrics"), "--fp-per-day", "0.3", "--per-nodes", "64",
                   "--split", "0.5", "--out", str(out), "--early-runs", "3", "--json")
    assert r.exit_code == 0, r.output
    assert "tune: scoring" in r.stderr  # progress goes to stderr, JSON alone to stdout
    STDERR.append(r.stderr)
    return json.loads(r.stdout), out


def test_tune_reports_progress_through_each_long_stage(tuned: tuple[dict, Path]) -> None:
    """Issue #28: per block while scoring and measuring, per candidate while replaying; #30: per
    block of each of the early-warning search's detector runs, and measuring done at once when
    one of those runs was of the chosen setting itself."""
    doc, _ = tuned
    stages = list(dict.fromkeys(p[0] for p in PROGRESS))
    again = ["replaying on the early choice"] if doc["early_warning"]["chosen"]["step"] else []
    assert stages == ["scoring", "replaying", "early warnings", *again, "measuring"]
    samples = PROGRESS[0][2]  # the scoring stage: one detector run
    for stage in stages:
        calls = [(d, t) for s, d, t, _ in PROGRESS if s == stage]
        if stage == "measuring" and calls == [(samples, samples)]:
            continue  # no run of its own: an earlier run measured the chosen setting
        assert len(calls) > 2 and calls[-1][0] == calls[-1][1]  # several steps, to the end
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    replays = [(d, t) for s, d, t, _ in PROGRESS if s == "replaying"]
    assert {t for _, t in replays} == {doc["candidates"]}
    runs = doc["early_warning"]["runs"]
    assert 0 < runs <= 3
    assert {t for s, _, t, _ in PROGRESS if s == "early warnings"} == {runs * samples}
    assert not any(bar for *_, bar in PROGRESS)  # --json and no terminal: no bar


def test_tune_bounds_the_heldout_rate_and_says_when_it_is_too_short(
        tuned: tuple[dict, Path]) -> None:
    """Issue #28: 0.5 day of 8 nodes held out cannot show a budget of 0.3/day per 64 nodes."""
    doc, path = tuned
    held = doc["heldout"]
    assert held["fp_per_day_upper95"] > 0.3 and held["fp_per_day_upper95"] >= held["fp_per_day"]
    bound = doc["heldout_bound"]
    assert bound["over_budget"] is True
    assert bound["fp_per_day_upper95"] == held["fp_per_day_upper95"]
    assert bound["days_needed_at_zero_fp"] == pytest.approx(days_for_bound(0.3, 8, 64),
                                                            abs=0.01)
    line = next(w for w in doc["warnings"] if "too short" in w)
    assert f"{held['fp_per_day_upper95']:.2f}/day per 64 nodes" in line
    assert f"after {days_for_bound(0.3, 8, 64):.1f} held-out days on 8 nodes" in line
    assert f"warning: {line}" in STDERR[0].splitlines()
    cal = load(path).calibration
    assert cal is not None and (cal.n_nodes, cal.gpus_per_node) == (8, 4)
    assert doc["gpus_per_node"] == 4
    assert cal.total().fp_per_day_upper95 == pytest.approx(held["fp_per_day_upper95"],
                                                          abs=1e-4)
    text = path.read_text()
    assert "gpus_per_node = 4" in text and "fp_per_day_upper95 = " in text.split(
        "[calibration.")[0]


def test_tune_reports_both_parts_and_writes_a_config(tuned: tuple[dict, Path]) -> None:
    doc, path = tuned
    tune_part, held = doc["tuned"]["run"], doc["heldout"]
    assert tune_part["span"][1] == pytest.approx(held["span"][0])  # time-ordered split
    assert tune_part["failures"] > 0 and held["failures"] > 0
    assert tune_part["failures"] + held["failures"] == 19
    for part in (tune_part, held, doc["default"]["tuned"], doc["default"]["heldout"]):
        assert part["early"] <= part["detected"] <= part["failures"]
        assert set(part["by_kind"]) == {"predictive", "hard"}
    # the choice was made within the budget on the tuning part (by replay)
    assert doc["tuned"]["replay"]["fp_per_day"] <= 0.3
    f = load(path)
    assert f.calibration is not None
    for key, value in doc["chosen"].items():
        assert getattr(f.detect, key) == pytest.approx(value)
    assert f.calibration.heldout_span == pytest.approx(tuple(held["span"]))
    assert f.calibration.n_nodes == doc["n_nodes"] == 8
    for k in f.calibration.kinds:
        assert k.fp_per_day == pytest.approx(held["by_kind"][k.kind]["fp_per_day"], abs=1e-4)


def test_tune_writes_and_reports_the_early_warning_choice(tuned: tuple[dict, Path]) -> None:
    """#30: the early-warning thresholds are searched (within --early-runs) and the chosen ones
    are in the config file and the JSON, next to the base values and what was tried."""
    doc, path = tuned
    early = doc["early_warning"]
    assert set(early["knobs"]) == set(EARLY_KNOBS)
    f = load(path)
    defaults = DetectorConfig()
    for knob, v in early["knobs"].items():
        assert getattr(f.detect, knob) == pytest.approx(v["chosen"])
        assert v["base"] == getattr(defaults, knob)
    tried = early["tried"]
    assert tried[0]["group"] == "base" and len(tried) >= 2
    assert {(t["group"], t["step"]) for t in tried[1:]} <= {
        (g, s) for g in EARLY_GROUPS for s in (1, -1)}
    for t in tried:
        assert t["early"] <= t["detected"] and t["false_positives"] >= 0
        assert isinstance(t["within_budget"], bool)
    chosen = next(t for t in tried if (t["group"], t["step"]) == (
        early["chosen"]["group"], early["chosen"]["step"]))
    assert chosen["within_budget"]
    for knob, value in chosen["settings"].items():
        assert early["knobs"][knob]["chosen"] == value


def test_no_early_search_keeps_the_base_early_warning_knobs(cluster: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "d.toml"
    base = tmp_path / "base.toml"
    start = replace(DetectorConfig(), stall_fraction=0.6, trend_min_events=6)
    base.write_text(dumps(DetectorFile(start, None)))
    r = invoke("tune", str(cluster / "metrics"), "--config", str(base), "--no-early-search",
               "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "tune: early warnings" not in r.stderr
    assert "early warnings: not searched (--no-early-search)" in r.stdout
    f = load(out)
    for knob in EARLY_KNOBS:
        assert getattr(f.detect, knob) == getattr(start, knob)


def test_detect_and_backtest_read_the_config(cluster: Path, tuned: tuple[dict, Path],
                                             tmp_path: Path) -> None:
    _, path = tuned
    cal = load(path).calibration
    assert cal is not None
    rates = {k.kind: k.fp_per_day for k in cal.kinds}
    r = invoke("detect", str(cluster / "metrics"), "--config", str(path), "--json")
    assert r.exit_code == 0, r.output
    alerts = [json.loads(line) for line in r.stdout.splitlines()]
    assert alerts
    bounds = {k.kind: k.fp_per_day_upper95 for k in cal.kinds}
    for a in alerts:
        assert a["expected_fp_per_day"] == pytest.approx(rates[a["kind"]], abs=1e-4)
        assert a["expected_fp_per_day_upper95"] == pytest.approx(bounds[a["kind"]], abs=1e-4)
        assert a["expected_fp_per_nodes"] == 64
    assert "note:" not in r.stderr  # the cluster it was tuned on
    plain = invoke("detect", str(cluster / "metrics"), "--json")
    assert plain.exit_code == 0
    assert all("expected_fp_per_day" not in json.loads(line)
               for line in plain.stdout.splitlines())
    alerts_out = tmp_path / "alerts.jsonl"
    b = invoke("backtest", str(cluster / "metrics"), "--config", str(path), "--baseline", "none",
               "--alerts-out", str(alerts_out), "--json")
    assert b.exit_code == 0, b.output
    rows = [json.loads(line) for line in alerts_out.read_text().splitlines()]
    assert rows and all("expected_fp_per_day" in row for row in rows)


def test_detect_notes_a_calibration_of_another_cluster_size(
        cluster: Path, tuned: tuple[dict, Path], tmp_path: Path) -> None:
    f = load(tuned[1])
    assert f.calibration is not None
    other = tmp_path / "other.toml"
    other.write_text(dumps(replace(f, calibration=replace(f.calibration, n_nodes=16,
                                                          gpus_per_node=8))))
    r = invoke("detect", str(cluster / "metrics"), "--config", str(other), "--json")
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1
    assert "tuned on 16 nodes x 8 GPUs, this cluster has 8 nodes x 4 GPUs" in notes[0]
    assert "scales with the node count" in notes[0]


@pytest.mark.parametrize("command", ["detect", "backtest", "tune"])
def test_a_bad_config_file_is_exit_2(cluster: Path, tmp_path: Path, command: str) -> None:
    r = invoke(command, str(cluster / "metrics"), "--config", str(tmp_path / "nope.toml"))
    assert r.exit_code == 2
    assert "no such file" in _error(r)
    bad = tmp_path / "bad.toml"
    bad.write_text("[detect]\nscore_onn = 3\n")
    r = invoke(command, str(cluster / "metrics"), "--config", str(bad))
    assert r.exit_code == 2
    assert "unknown key(s): score_onn" in _error(r)


def test_too_little_history_says_how_much_is_needed(cluster: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.toml"
    r = invoke("tune", str(cluster / "metrics"), "--split", "0.2", "--out", str(out))
    assert r.exit_code == 2
    assert "too little history" in _error(r) and "needs at least 45.0 h" in _error(r)
    assert not out.exists()


def test_no_failure_in_the_tuning_part(cluster: Path, tmp_path: Path) -> None:
    labels = [json.loads(x) for x in (cluster / "labels.jsonl").read_text().splitlines()]
    t_max = max(rec["time"] for rec in labels if rec["type"] == "failure")
    late = tmp_path / "late.jsonl"
    late.write_text(json.dumps({"node": labels[0]["node"], "time": t_max, "xid": 79}) + "\n")
    r = invoke("tune", str(cluster / "metrics"), "--failures", str(late))
    assert r.exit_code == 2
    assert "no known failure in the tuning part" in _error(r)


def test_an_unreachable_budget_is_exit_1(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trainguard.cli.tune as cli_tune

    def unreachable(*_a: object, **_k: object) -> None:
        raise BudgetUnreachable("no setting keeps false alarms within 0/day")

    monkeypatch.setattr(cli_tune, "tune", unreachable)
    r = invoke("tune", str(cluster / "metrics"), "--fp-per-day", "0")
    assert r.exit_code == 1
    assert "no setting keeps false alarms" in _error(r)


@pytest.mark.parametrize(("args", "match"), [
    (["--split", "1.5"], "--split"), (["--per-nodes", "0"], "--per-nodes"),
    (["--fp-per-day", "-1"], "--fp-per-day"), (["--early-runs", "0"], "--early-runs")])
def test_bad_options_are_usage_errors(cluster: Path, args: list[str], match: str) -> None:
    r = invoke("tune", str(cluster / "metrics"), *args)
    assert r.exit_code == 2
    assert match in r.output


def test_a_missing_store_is_exit_2_before_reading_telemetry(tmp_path: Path) -> None:
    r = invoke("tune", str(tmp_path / "no-such-metrics"), "--db", str(tmp_path / "none.db"))
    assert r.exit_code == 2
    assert "none.db" in _error(r)
