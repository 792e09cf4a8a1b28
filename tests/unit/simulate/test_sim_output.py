"""Files written by simulate_to_dir: format, alignment, determinism, ground-truth consistency."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sim_helpers import SMALL, SimRun, parse_om, read_text

from trainguard.evidence import ScanOptions, TimeKind, load_rules, scan_paths
from trainguard.simulate import WINDOW_S, SimConfig, simulate_to_dir

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_differs(small_run: SimRun, tmp_path: Path) -> None:
    again = tmp_path / "again"
    simulate_to_dir(SMALL, again)
    assert _digest(again) == _digest(small_run.out)
    other = tmp_path / "other"
    simulate_to_dir(replace(SMALL, seed=12), other)
    assert _digest(other)["labels.jsonl"] != _digest(small_run.out)["labels.jsonl"]


def test_layout_and_manifest(small_run: SimRun) -> None:
    out = small_run.out
    assert (out / "labels.jsonl").is_file() and (out / "manifest.json").is_file()
    m = small_run.manifest
    assert m["seed"] == SMALL.seed and m["config"]["nodes"] == SMALL.nodes
    assert sorted(p.name for p in (out / "kernel").iterdir()) == [
        f"{n}.log" for n in SMALL.node_names]
    names = [x["name"] for x in m["metrics"]]
    assert "DCGM_FI_DEV_XID_ERRORS" in names and "node_cpu_seconds" in names
    assert 20 <= sum(x["per_gpu"] for x in m["metrics"]) <= 30
    assert m["counts"]["failure"] == small_run.summary.failures > 0


def test_window_files_are_aligned(small_run: SimRun) -> None:
    files = sorted((small_run.out / "metrics").iterdir())
    assert len(files) == SMALL.n_windows == small_run.summary.windows
    for f in files:
        start = int(f.name.removeprefix("metrics-").removesuffix(".om"))
        assert start % WINDOW_S == 0
        ts = {t for samples in parse_om(f).series.values() for t, _ in samples}
        assert min(ts) >= max(start, SMALL.start_s)
        assert max(ts) < min(start + WINDOW_S, SMALL.end_s)
        assert all(t % SMALL.interval_s == 0 for t in ts)


def test_openmetrics_structure(small_run: SimRun) -> None:
    f = sorted((small_run.out / "metrics").iterdir())[1]
    p = parse_om(f)
    assert p.last_line == "# EOF"
    text = read_text(f)
    for fam in p.families:
        assert text.count(f"# HELP {fam} ") == 1
    assert p.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert p.types["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == "gauge"
    assert p.types["node_cpu_seconds"] == "counter"
    for key, samples in p.series.items():
        ts = [t for t, _ in samples]
        assert ts == sorted(set(ts)), f"{key} samples out of order"
        if key[0].endswith("_total") or key[0] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            # counters never decrease within a window except at a reboot (value restarts low)
            vals = np.array([v for _, v in samples])
            drops = np.flatnonzero(np.diff(vals) < 0)
            assert all(vals[i + 1] < vals[i] * 0.5 for i in drops)


def test_promtool_accepts_output(tmp_path: Path) -> None:
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool not installed")
    cfg = SimConfig(nodes=2, gpus_per_node=2, days=0.1, seed=5, interval_s=60,
                    job_label=True, failures_per_day=20)
    out = tmp_path / "sim"
    simulate_to_dir(cfg, out, compress=False)
    files = sorted((out / "metrics").iterdir())
    assert any('hpc_job="job-' in f.read_text() for f in files)
    result = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics",
                             str(files[0]), str(tmp_path / "tsdb")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "NUM SAMPLES" in result.stdout


def test_gzip_output_has_same_text(tmp_path: Path) -> None:
    cfg = SimConfig(nodes=2, gpus_per_node=2, days=0.05, seed=5)
    simulate_to_dir(cfg, tmp_path / "plain")
    simulate_to_dir(cfg, tmp_path / "gz", compress=True)
    plain = sorted((tmp_path / "plain" / "metrics").iterdir())
    gz = sorted((tmp_path / "gz" / "metrics").iterdir())
    assert [p.name + ".gz" for p in plain] == [g.name for g in gz]
    assert read_text(gz[0]) == plain[0].read_text()


def test_xid_gauge_matches_labels(small_run: SimRun) -> None:
    iv = SMALL.interval_s
    failures = [x for x in small_run.labels if x["type"] == "failure"]
    assert failures
    for lab in failures:
        for gpu in lab["gpus"]:
            ts, vs = small_run.gpu_series("DCGM_FI_DEV_XID_ERRORS", lab["node"], gpu)
            after = (ts >= lab["time"]) & (ts < lab["time"] + 3 * iv)
            assert (vs[after] == lab["xid"]).any(), lab
            before = (ts < lab["time"]) & (ts >= lab["time"] - 10 * iv)
            assert not (vs[before] == lab["xid"]).any(), lab
            if lab["vanishes"]:
                ts_u, _ = small_run.gpu_series("DCGM_FI_DEV_GPU_UTIL", lab["node"], gpu)
                gone = (ts_u > lab["time"] + 2 * iv) & (ts_u < lab["back"])
                assert not gone.any(), f"GPU series should vanish after XID 79: {lab}"


def test_app_xid_labels_match_gauge(small_run: SimRun) -> None:
    apps = [x for x in small_run.labels if x["type"] == "app_xid"]
    assert apps
    for lab in apps:
        ts, vs = small_run.gpu_series("DCGM_FI_DEV_XID_ERRORS", lab["node"], lab["gpus"][0])
        after = (ts >= lab["time"]) & (ts < lab["time"] + 3 * SMALL.interval_s)
        assert (vs[after] == lab["xid"]).any() or not after.any(), lab


def test_maintenance_hides_node_and_resets_counters(small_run: SimRun) -> None:
    maint = [x for x in small_run.labels if x["type"] == "maintenance"]
    assert maint
    lab = maint[0]
    ts, vs = small_run.gpu_series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", lab["node"], "0")
    assert not ((ts > lab["start"] + SMALL.interval_s) & (ts < lab["end"])).any()
    before, after = vs[ts < lab["start"]], vs[ts >= lab["end"]]
    if before.size and after.size:
        assert after[0] < before[-1]


def test_kernel_logs_parse_to_the_labelled_xids(small_run: SimRun) -> None:
    events, stats = scan_paths([str(small_run.out / "kernel")], load_rules([]),
                               ScanOptions(default_year=2024))
    assert not stats.warnings
    found = {(e.host, e.xid, int(e.time or 0), e.gpu_pci) for e in events
             if e.xid is not None and e.time_kind is TimeKind.ABSOLUTE}
    pci = small_run.manifest["gpu_pci"]
    expected = [(x["node"], x["xid"], x["time"], pci[int(g)])
                for x in small_run.labels if x["type"] in ("failure", "app_xid")
                for g in x["gpus"]]
    assert expected
    assert set(expected) <= found
    assert {(h, x) for h, x, _, _ in found} <= {(h, x) for h, x, _, _ in expected}
