"""Issue #28: `trainguard tune` shows a progress bar through its long stages on a terminal (one
line per stage otherwise), and says when its held-out part is too short for the budget."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import trainguard.cli.tune as cli_tune
from trainguard.cli.main import app
from trainguard.detect.calibration import KindRate, days_for_bound, poisson_upper95
from trainguard.detect.config import DetectorConfig
from trainguard.detect.truth import GroundTruth
from trainguard.detect.tune import Budget, BudgetUnreachable, Figures, TuneResult
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

STAGES = (("scoring", 40), ("replaying", 120), ("measuring", 40))


def _feed(progress: cli_tune.TuneProgress) -> None:
    for stage, total in STAGES:
        for done in range(0, total + 1, 20):
            progress(stage, done, total)


def _terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=100, color_system=None), buf


def test_a_bar_per_stage_runs_to_its_total() -> None:
    console, buf = _terminal()
    with cli_tune.TuneProgress(console, bar=True) as progress:
        _feed(progress)
    assert progress.bar is not None
    assert [(t.description, t.completed, t.total) for t in progress.bar.tasks] == [
        (s, float(n), float(n)) for s, n in STAGES]
    shown = buf.getvalue()
    assert all(f"tune: {s}" in shown for s, _ in STAGES) and "100%" in shown


def test_without_a_bar_one_line_per_stage_start_and_end() -> None:
    console, buf = _terminal()
    with cli_tune.TuneProgress(console, bar=False) as progress:
        _feed(progress)
    assert buf.getvalue().splitlines() == [
        line for s, _ in STAGES for line in (f"tune: {s}...", f"tune: {s} done")]


@pytest.mark.parametrize(("json_out", "tty", "bar"), [
    (False, True, True), (True, True, False), (False, False, False), (True, False, False)])
def test_the_bar_only_on_a_terminal_and_never_with_json(json_out: bool, tty: bool,
                                                         bar: bool) -> None:
    assert cli_tune.want_bar(json_out, tty) is bar


@pytest.mark.parametrize(("args", "bar"), [((), True), (("--json",), False)])
def test_the_command_shows_the_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, args: tuple[str, ...],
                                                  bar: bool) -> None:
    console, buf = _terminal()
    seen: list[bool] = []

    def fake_tune(*_a: object, progress: cli_tune.TuneProgress, **_k: object) -> None:
        seen.append(progress.bar is not None)
        _feed(progress)
        raise BudgetUnreachable("no setting keeps false alarms within 0.3/day")

    tel = Telemetry(np.arange(0, 60, 30, dtype=np.int64), 30, (MetricSeries(
        "node_load1", MetricKind.GAUGE, (Entity("a"),), np.ones((1, 2))),))
    monkeypatch.setattr(cli_tune, "stderr_is_tty", lambda: True)
    monkeypatch.setattr(cli_tune, "err", console)
    monkeypatch.setattr(cli_tune, "load_telemetry", lambda *_a, **_k: tel)
    monkeypatch.setattr(cli_tune, "_load_truth", lambda *_a: (GroundTruth(()), "test", False))
    monkeypatch.setattr(cli_tune, "tune", fake_tune)
    r = CliRunner().invoke(app, ["tune", str(tmp_path), *args])
    assert r.exit_code == 1, r.output
    assert seen == [bar]
    assert ("100%" in buf.getvalue()) is bar
    assert ("tune: replaying done" in buf.getvalue()) is not bar


def _fig(days: float, fp: int, n_nodes: int = 8) -> Figures:
    scale = 64 / n_nodes / days
    return Figures((0.0, days * 86_400.0), 3, 2, 1, fp, fp * scale,
                   (KindRate("predictive", fp, fp * scale, poisson_upper95(fp) * scale),),
                   poisson_upper95(fp) * scale)


def _result(held_days: float, budget: float, fp: int = 0) -> TuneResult:
    tune_part = _fig(held_days, 0)
    return TuneResult(DetectorConfig(), DetectorConfig(), Budget(budget, 64), 8, 10, tune_part,
                      tune_part, _fig(held_days, fp), tune_part, _fig(held_days, fp), 4)


def test_a_short_heldout_part_is_said_with_the_days_it_would_take() -> None:
    res = _result(1.0, 0.3)  # 0 of 0 in a day of 8 nodes: up to 23.7/day per 64 nodes
    assert res.heldout_too_short
    line = cli_tune.heldout_bound_warning(res)
    need = days_for_bound(0.3, 8, 64)
    assert line is not None and f"at {poisson_upper95(0) * 8:.2f}/day per 64 nodes" in line
    assert f"after {need:.1f} held-out days on 8 nodes" in line
    assert f"about {2 * need:.0f} days of history at this --split" in line  # half held out
    assert line in cli_tune.tune_warnings(res)
    doc = res.to_dict()["heldout_bound"]
    assert doc["over_budget"] is True and doc["days_needed_at_zero_fp"] == round(need, 2)


def test_a_long_enough_heldout_part_says_nothing_of_its_bound() -> None:
    res = _result(days_for_bound(0.3, 8, 64) * 1.01, 0.3)
    assert not res.heldout_too_short
    assert cli_tune.heldout_bound_warning(res) is None
    assert res.to_dict()["heldout_bound"]["over_budget"] is False


def test_a_budget_of_zero_can_never_be_shown() -> None:
    res = _result(1000.0, 0.0)
    line = cli_tune.heldout_bound_warning(res)
    assert line is not None and "no length of history can show a budget of 0" in line
    assert res.to_dict()["heldout_bound"]["days_needed_at_zero_fp"] is None


def test_hard_evidence_over_budget_is_said_as_findings_by_metric() -> None:
    from dataclasses import replace

    from trainguard.detect.tune_findings import HardFinding

    scale = 64 / 8 / 10.0
    finding = HardFinding("DCGM_FI_DEV_XID_ERRORS", 4, ("n3", "n5"), 4 * scale)
    hard = Figures((0.0, 10 * 86_400.0), 3, 2, 1, 4, 4 * scale,
                   (KindRate("hard", 4, 4 * scale, poisson_upper95(4) * scale),),
                   poisson_upper95(4) * scale, (finding,))
    res = replace(_result(100.0, 0.3), replayed_tune=hard)
    assert res.hard_over_budget
    lines = cli_tune.tune_warnings(res)
    said = [line for line in lines if line.startswith("finding: ")]
    assert len(said) == 1
    assert "DCGM_FI_DEV_XID_ERRORS raised 4 false alarm(s) on 2 node(s) (n3, n5)" in said[0]
    assert f"{4 * scale:.2f}/day per 64 nodes" in said[0]
    assert res.to_dict()["tuned"]["replay"]["hard_findings"][0]["nodes"] == ["n3", "n5"]


def test_the_early_warning_line_says_what_moved_and_what_it_cost() -> None:
    """#30: the human output names the early-warning knobs the search moved, base -> chosen."""
    from dataclasses import replace

    from trainguard.detect.tune_early import EarlyChoice, Trial, level

    base = DetectorConfig()
    fig = _fig(1.0, 0)
    looser = replace(base, **level(base, "stall", -1))
    trials = (Trial("base", 0, base, fig, fig, fig), Trial("stall", -1, looser, fig, fig, fig))
    moved = replace(_result(1.0, 0.3), chosen=looser,
                    early=EarlyChoice(base, trials[1], trials, 3, 8))
    line = cli_tune.early_line(moved)
    assert line.startswith("early warnings: stall one level looser: ")
    assert (f"stall_fraction {base.stall_fraction:g} -> {looser.stall_fraction:g}, "
            f"stall_min_events {base.stall_min_events} -> {looser.stall_min_events}") in line
    assert "1 settings tried besides the base, 3 detector runs, --early-runs 8" in line
    doc = moved.to_dict()["early_warning"]
    assert doc["knobs"]["stall_fraction"] == {"chosen": looser.stall_fraction,
                                              "base": base.stall_fraction}
    assert doc["chosen"] == {"group": "stall", "step": -1} and doc["runs"] == 3
    kept = replace(moved, early=EarlyChoice(base, trials[0], trials, 3, 8))
    assert "thresholds kept" in cli_tune.early_line(kept)
    assert "not searched" in cli_tune.early_line(_result(1.0, 0.3))
