"""Held-out generator style e (benchmarks/heldout/gen_e.py, written blind to the detector):
determinism, the OpenMetrics format, labels that agree with the kernel logs and the XID gauge,
and telemetry the detector reads with every node named."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_heldout_gen import _digest, _parse

ROOT = Path(__file__).parents[2]
SMALL = ["--nodes", "4", "--gpus", "2", "--days", "0.25", "--interval", "60", "--failures", "3"]


def _generate(out: Path, seed: int) -> Path:
    subprocess.run([sys.executable, str(ROOT / "benchmarks/heldout/gen_e.py"), *SMALL,
                    "--seed", str(seed), "--out", str(out)], check=True, capture_output=True,
                   timeout=300)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate(tmp_path_factory.mktemp("style_e") / "c", seed=3)


def _labels(d: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (d / "labels.jsonl").read_text().splitlines()]


def test_a_seed_gives_the_same_cluster_and_another_seed_another(cluster: Path,
                                                                tmp_path: Path) -> None:
    assert _digest(_generate(tmp_path / "again", seed=3)) == _digest(cluster)
    assert _digest(_generate(tmp_path / "other", seed=4)) != _digest(cluster)


def test_windows_are_openmetrics_with_dcgm_exporter_labels(cluster: Path) -> None:
    files = sorted((cluster / "metrics").glob("*.om"))
    assert len(files) == 3 and all(int(f.name[:-3]) % 7200 == 0 for f in files)
    fams = _parse(files[0])
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "up", "node_boot_time_seconds"} <= set(fams)
    series = " ".join(fams["DCGM_FI_DEV_GPU_TEMP"])
    for label in ("Hostname=", "UUID=", 'job="dcgm"', ":9400"):
        assert label in series


def test_each_failure_is_in_its_nodes_kernel_log_and_on_its_xid_gauge(cluster: Path) -> None:
    failures = [x for x in _labels(cluster) if x["type"] == "failure"]
    assert len(failures) == 3
    for f in failures:
        log = (cluster / "kernel" / f"{f['node']}.log").read_text()
        assert re.search(rf"NVRM: Xid \(PCI:[0-9a-f:.]+\): {f['xid']}, ", log), f
        t = int(str(f["time"]))
        shown = [v for w in (t // 7200 * 7200, t // 7200 * 7200 + 7200)
                 if (p := cluster / "metrics" / f"{w}.om").exists()
                 for key, samples in _parse(p)["DCGM_FI_DEV_XID_ERRORS"].items()
                 if str(f["uuid"]) in key for ts, v in samples if t <= ts < t + 600]
        if t + 600 < _end(cluster):
            assert f["xid"] in shown, f


def _end(d: Path) -> int:
    return max(int(p.name[:-3]) for p in (d / "metrics").glob("*.om")) + 7200


def test_the_detector_reads_every_node_and_scores_every_failure(cluster: Path) -> None:
    tg = shutil.which("trainguard", path=str(Path(sys.executable).parent))
    assert tg is not None
    r = subprocess.run([tg, "backtest", str(cluster), "--baseline", "none", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert report["span_check"]["in_span"] == 3 and report["span_check"]["unknown_node"] == 0
    assert report["cards"][0]["n_nodes"] == 4
