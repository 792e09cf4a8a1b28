"""`trainguard detect`'s terminal table shows each alert's evidence as the detector states it:
a hard alert's XID however many signals come before it, an early-warning finding in its own
words (a count of blocks, not a deviation in σ), and one entry per series with a repeat count
instead of the same series three times."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli import console as console_mod
from trainguard.cli.alerttable import distinct_signals, signal_text, signals_cell
from trainguard.cli.main import app
from trainguard.detect.alerts import Signal
from trainguard.simulate import SimConfig, simulate_to_dir

# Seed 15 at 4 failures/day: an XID 95 on node04 and an XID 94 on node01, each reported after
# three uncorrectable-error counters, and an ECC SBE early warning on node04 that fired again
# while its episode lasted.
TINY = SimConfig(nodes=6, gpus_per_node=2, days=0.5, seed=15, interval_s=60, failures_per_day=4)
WIDE = 400
"""Columns of the test's terminal: a cell is one line, so what it says can be searched."""

XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
DBE = ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
       "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
UNCORRECTABLE = "uncorrectable error count increased"


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("detect-table") / "sim"
    simulate_to_dir(TINY, out)
    return out


@pytest.fixture(scope="module")
def detected(sim_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[str, list[dict[str, object]]]:
    """The table `detect` prints and the episodes it wrote with --out."""
    alerts_file = tmp_path_factory.mktemp("detect-out") / "alerts.jsonl"
    mp = pytest.MonkeyPatch()
    mp.setattr(console_mod.out, "width", WIDE)
    try:
        result = CliRunner().invoke(app, ["detect", str(sim_dir / "metrics"), "--limit", "0",
                                          "--out", str(alerts_file)])
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    return result.stdout, [json.loads(line) for line in alerts_file.read_text().splitlines()]


def _rows(table: str) -> list[str]:
    return [line for line in table.splitlines() if re.match(r"^│ node\d+ ", line)]


def test_the_table_shows_every_xid_of_the_alerts(
        detected: tuple[str, list[dict[str, object]]]) -> None:
    """Hard alerts' fatal XIDs and the warnings of non-fatal ones (XID 63...)."""
    table, alerts = detected
    expected = Counter(m for a in alerts
                       for s in a["signals"]  # type: ignore[attr-defined]
                       if str(s.get("detail", "")).startswith("XID ")
                       for m in re.findall(r"XID \d+", str(s["detail"]))[:1])
    assert sum(expected.values()) >= 2, "the scenario has hardware XIDs"
    assert any(a["kind"] == "hard" for a in alerts)
    assert Counter(re.findall(r"XID \d+", table)) == expected


def test_an_early_warning_is_shown_in_its_own_words_once_per_series(
        detected: tuple[str, list[dict[str, object]]]) -> None:
    table, alerts = detected
    found = [a for a in alerts if a["kind"] == "predictive"
             and any("of the last" in str(s.get("detail", ""))
                     for s in a["signals"])]  # type: ignore[attr-defined]
    assert found, "the scenario has a recurring-error early warning"
    rows = _rows(table)
    for a in found:
        signals: list[dict[str, object]] = a["signals"]  # type: ignore[assignment]
        first = next(s for s in signals if "of the last" in str(s.get("detail", "")))
        row = next(r for r in rows if r.startswith(f"│ {a['node']} ") and "predictive" in r
                   and str(first["metric"]) in r)
        series = f"{first['metric']} gpu{first['gpu']}"
        assert f"{series}: {first['detail']}" in row
        assert f"{first['deviation']:+.1f}σ" not in row  # a count of blocks is no deviation
        repeats = sum(1 for s in signals if f"{s['metric']} gpu{s['gpu']}" == series)
        assert repeats > 1, "the finding fired again in its episode"
        assert row.count(series) == 1 and f"(×{repeats})" in row, row


@pytest.mark.parametrize(("signal", "hard", "text"), [
    (Signal(XID_ERRORS, "3", 79.0, "XID 79"), True, f"{XID_ERRORS} gpu3: XID 79"),
    (Signal(DBE[0], None, 2.0), True, f"{DBE[0]}: 2"),
    (Signal("DCGM_FI_DEV_GPU_TEMP", "1", 4.26), False, "DCGM_FI_DEV_GPU_TEMP gpu1 +4.3σ"),
    (Signal("node_load1", None, -3.0), False, "node_load1 -3.0σ"),
    (Signal("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "0", 4.0,
            "error count recurring: 4 of the last 15 blocks (usually 0.1)"), False,
     "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL gpu0: error count recurring: 4 of the last 15 blocks "
     "(usually 0.1)"),
    (Signal("DCGM_FI_DEV_SM_CLOCK", "2", 3.09, "jitter 3.1x the node's other GPUs for 5 blocks"),
     False, "DCGM_FI_DEV_SM_CLOCK gpu2: jitter 3.1x the node's other GPUs for 5 blocks"),
])
def test_signal_text(signal: Signal, hard: bool, text: str) -> None:
    assert signal_text(signal, hard=hard) == text


def test_repeats_of_one_series_are_one_entry_with_its_first_finding() -> None:
    nvlink = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    signals = [Signal(nvlink, "1", float(n), f"error count recurring: {n} of the last 15 blocks "
                      f"(usually {u})") for n, u in ((4, 0.1), (4, 0.4), (5, 1.0))]
    signals.append(Signal(nvlink, "1", 28.2))   # the same series at the episode's peak
    signals.append(Signal(nvlink, "0", 6.0))    # another GPU: another series
    cell = signals_cell(signals, hard=False)
    assert cell == (f"{nvlink} gpu1: error count recurring: 4 of the last 15 blocks "
                    f"(usually 0.1) (×4), {nvlink} gpu0 +6.0σ")


def test_a_bare_deviation_keeps_the_strongest() -> None:
    (entry,) = distinct_signals([Signal("DCGM_FI_DEV_GPU_TEMP", None, 2.0),
                                 Signal("DCGM_FI_DEV_GPU_TEMP", None, -5.0)])
    assert (entry.signal.deviation, entry.count) == (-5.0, 2)


def test_the_xids_come_first_and_are_never_cut() -> None:
    signals = [Signal(m, "0", 1.0, UNCORRECTABLE) for m in DBE]
    signals += [Signal(XID_ERRORS, "0", 95.0, "XID 95"), Signal(XID_ERRORS, "0", 48.0, "XID 48"),
                Signal("(all GPU series)", "0", 2.0, "GPU stopped reporting")]
    cell = signals_cell(signals, hard=True)
    assert cell.startswith(f"{XID_ERRORS} gpu0: XID 95, {XID_ERRORS} gpu0: XID 48, ")
    assert cell.endswith(", +3 more")
    assert re.findall(r"XID \d+", signals_cell(signals, hard=True, shown=1)) == ["XID 95", "XID 48"]
