"""`trainguard detect`'s terminal table shows a hard alert's evidence (the XID number), not only
its metric: what the JSON says must be readable in the table."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.detect import _signal_text
from trainguard.cli.main import app
from trainguard.detect.alerts import Signal
from trainguard.simulate import SimConfig, simulate_to_dir

# Seed 4 at 4 failures/day: an XID 79 on node04 and an XID 74 on node01.
TINY = SimConfig(nodes=6, gpus_per_node=2, days=0.5, seed=4, interval_s=60, failures_per_day=4)


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("detect-table") / "sim"
    simulate_to_dir(TINY, out)
    return out


def test_the_table_shows_each_hard_alerts_xid(sim_dir: Path, tmp_path: Path) -> None:
    alerts_file = tmp_path / "alerts.jsonl"
    result = CliRunner().invoke(app, ["detect", str(sim_dir / "metrics"), "--limit", "0",
                                      "--out", str(alerts_file)])
    assert result.exit_code == 0, result.output
    alerts = [json.loads(line) for line in alerts_file.read_text().splitlines()]
    expected = Counter(s["detail"] for a in alerts if a["kind"] == "hard"
                       for s in a["signals"][:3] if s.get("detail", "").startswith("XID "))
    assert expected, "the scenario has hardware XIDs"
    shown = Counter(re.findall(r"XID \d+", result.stdout))
    assert shown == expected


@pytest.mark.parametrize(("signal", "hard", "text"), [
    (Signal("DCGM_FI_DEV_XID_ERRORS", "3", 79.0, "XID 79"), True,
     "DCGM_FI_DEV_XID_ERRORS gpu3: XID 79"),
    (Signal("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", None, 2.0), True,
     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: 2"),
    (Signal("DCGM_FI_DEV_GPU_TEMP", "1", 4.26), False, "DCGM_FI_DEV_GPU_TEMP gpu1 +4.3σ"),
    (Signal("node_load1", None, -3.0), False, "node_load1 -3.0σ"),
])
def test_signal_text(signal: Signal, hard: bool, text: str) -> None:
    assert _signal_text(signal, hard=hard) == text
