"""`trainguard ckpt analyze` on a small simulated cluster: the saves and loads it lists are the
simulator's checkpoint schedule and job starts, worked out here from the jobs' configuration."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner, Result

import trainguard.telemetry
from trainguard.cli.main import app
from trainguard.simulate import SimConfig, build_scenario, simulate_to_dir
from trainguard.simulate.workload import Job

# Seed 7: 48 saves and 5 job-start loads over 6 nodes in a day, several jobs at once, no
# loader stall (extra NFS reads) and no outage or scrape gap next to a save or load, so every
# phase has exactly the sample span the schedule gives.
CFG = SimConfig(nodes=6, gpus_per_node=1, days=1.0, seed=7)
IV = CFG.interval_s
MIN_DURATION_S = 60  # the command's default --min-duration
MAX_GAP = 2  # samples: the default --max-gap of 60 s

runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["ckpt", "analyze", *args])


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ckpt-analyze") / "sim"
    simulate_to_dir(CFG, out)
    return out


@pytest.fixture(scope="module")
def analysed(sim_dir: Path) -> dict[str, Any]:
    result = invoke(str(sim_dir), "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


# --- the truth, from the jobs' checkpoint schedule ----------------------------------------------


def _grid() -> np.ndarray:
    return np.arange(-(-CFG.start_s // IV) * IV, CFG.end_s, IV)


def _save_samples(job: Job, t: np.ndarray) -> np.ndarray:
    """The simulator's workload model: a job checkpoints for ckpt_len_s every ckpt_period_s from
    ckpt_offset_s on, once it is past its first 15 minutes."""
    rel = t - job.start_s
    return ((t >= job.start_s) & (t < job.end_s) & (rel > 900)
            & ((rel - job.ckpt_offset_s) % job.ckpt_period_s < job.ckpt_len_s))


def _load_samples(job: Job, t: np.ndarray) -> np.ndarray:
    """... and reads its checkpoint and data hard for its first 10 minutes."""
    return (t >= job.start_s) & (t < job.end_s) & (t - job.start_s < 600)


def _close(mask: np.ndarray) -> np.ndarray:
    """Inactive stretches of at most MAX_GAP samples between active ones count as active."""
    out = mask.copy()
    for i in range(mask.shape[0]):
        on = np.flatnonzero(mask[i])
        for a, b in itertools.pairwise(on):
            if 1 < b - a <= MAX_GAP + 1:
                out[i, a:b] = True
    return out


def _expected(kind: str) -> list[tuple[int, int, list[str]]]:
    """(start, end, nodes) of each phase: the runs of "some node transfers", where a sample's
    rate covers the step before it (so a run of samples a..b is the time (t_a - step, t_b])."""
    t = _grid()
    active = np.zeros((CFG.nodes, t.size), dtype=bool)
    for job in build_scenario(CFG).jobs:
        active[list(job.nodes)] |= (_save_samples if kind == "save" else _load_samples)(job, t)
    active[:, 0] = False  # no rate before the second sample
    active = _close(active)
    any_node = _close(active.any(axis=0)[None, :])[0]
    out: list[tuple[int, int, list[str]]] = []
    edges = np.diff(np.concatenate(([0], any_node.astype(int), [0])))
    for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1, strict=True):
        if (b - a + 1) * IV < MIN_DURATION_S:
            continue
        nodes = [CFG.node_names[i] for i in np.flatnonzero(active[:, a:b + 1].any(axis=1))]
        out.append((int(t[a]) - IV, int(t[b]), nodes))
    return out


def _ckpt_rate(job: Job) -> float:
    """The simulator's per-node save rate: bigger models (more GPU memory) write faster."""
    return 4e8 + 8e8 * (job.fb_used_mib - 52_000) / 26_000


def test_the_scenario_has_concurrent_jobs_with_many_saves() -> None:
    jobs = build_scenario(CFG).jobs
    assert len([j for j in jobs if CFG.start_s <= j.start_s < CFG.end_s]) == 5
    assert len(_expected("save")) == 48
    assert not [b for b in build_scenario(CFG).benign if b.what == "loader_stall"]


# --- the command --------------------------------------------------------------------------------


def test_saves_match_the_checkpoint_schedule(analysed: dict[str, Any]) -> None:
    got = [(p["start"], p["end"], [n["node"] for n in p["nodes"]])
           for p in analysed["phases"] if p["kind"] == "save"]
    assert got == _expected("save")
    assert analysed["save_source"] == "node_mountstats_nfs_total_write_bytes_total"


def test_loads_match_the_job_starts(analysed: dict[str, Any]) -> None:
    got = [(p["start"], p["end"], [n["node"] for n in p["nodes"]])
           for p in analysed["phases"] if p["kind"] == "load"]
    assert got == _expected("load")
    assert analysed["load_source"] == "node_mountstats_nfs_total_read_bytes_total"


def test_bandwidth_and_utilization_match_each_jobs_write_rate(analysed: dict[str, Any]) -> None:
    jobs = build_scenario(CFG).jobs
    utils: list[float] = []
    for p in (p for p in analysed["phases"] if p["kind"] == "save"):
        for n in p["nodes"]:
            node = CFG.node_names.index(n["node"])
            (job,) = [j for j in jobs if node in j.nodes and j.start_s < n["end"] <= j.end_s]
            # Per-sample log-normal noise of 8%: the mean over >= 2 samples is within 15%.
            assert n["mean_bps"] == pytest.approx(_ckpt_rate(job), rel=0.15)
            expected_util = 100 * 8 * _ckpt_rate(job) / 200e9
            assert n["util_mean_pct"] == pytest.approx(expected_util, rel=0.15)
            assert n["bytes"] == pytest.approx(n["mean_bps"] * (n["end"] - n["start"]), rel=1e-6)
            utils.append(n["util_mean_pct"])
        assert p["bytes"] == pytest.approx(sum(n["bytes"] for n in p["nodes"]), rel=1e-6)
    s = analysed["summary"]
    assert s["save_util_min_pct"] == pytest.approx(min(utils), abs=1e-3)
    assert s["save_util_max_pct"] == pytest.approx(max(utils), abs=1e-3)
    assert (s["saves"], s["loads"]) == (48, 5)
    assert s["save_queue_share"] is None  # the simulator has no per-operation timings


def test_link_gbps_scales_utilization(sim_dir: Path, analysed: dict[str, Any]) -> None:
    result = invoke(str(sim_dir), "--json", "--link-gbps", "400", "--node", "node0[12]")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["nodes"] == ["node01", "node02"]
    assert doc["link_gbps"] == 400
    first = next(p for p in doc["phases"] if p["kind"] == "save")
    same = next(p for p in analysed["phases"] if p["start"] == first["start"])
    by_node = {n["node"]: n for n in same["nodes"]}
    for n in first["nodes"]:
        assert n["util_mean_pct"] == pytest.approx(by_node[n["node"]]["util_mean_pct"] / 2,
                                                   abs=1e-3)


def test_table_and_summary(sim_dir: Path) -> None:
    result = invoke(str(sim_dir), "--limit", "3")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "6 nodes, 24.0 h at 30s" in text
    assert "53 checkpoint phases (link 200 Gbit/s per node)" in text
    assert "first 3 of 53; --limit 0 shows all" in text
    assert "48 saves, 5 loads; median save" in text
    assert "% of each node's 200 Gbit/s link" in text
    assert "hint: saves used at most" in text


def test_min_duration_drops_short_phases(sim_dir: Path) -> None:
    result = invoke(str(sim_dir), "--json", "--min-duration", "200")
    assert result.exit_code == 0, result.output
    phases = json.loads(result.stdout)["phases"]
    assert phases and all(p["duration_s"] >= 200 for p in phases)
    assert len(phases) < 53


# --- errors: one line, non-zero exit ------------------------------------------------------------


def _one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_no_input_is_a_usage_error() -> None:
    result = invoke()
    assert result.exit_code == 2
    assert "--prometheus URL" in result.stderr


def test_no_nfs_metrics_names_the_metrics_looked_for(tmp_path: Path) -> None:
    f = tmp_path / "gpu.om"
    f.write_text('# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{Hostname="n1",gpu="0"} '
                 '40 1731888000\nDCGM_FI_DEV_GPU_TEMP{Hostname="n1",gpu="0"} 41 1731888030\n'
                 '# EOF\n')
    result = invoke(str(f))
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "no NFS byte counters found" in line
    assert "node_mountstats_nfs_total_write_bytes_total" in line
    assert "--net-device" in line


def test_unknown_node_and_bad_options(sim_dir: Path) -> None:
    result = invoke(str(sim_dir), "--node", "gpu7")
    assert result.exit_code == 2
    assert "no node matches gpu7" in _one_error_line(result)
    result = invoke(str(sim_dir), "--link-gbps", "0")
    assert result.exit_code == 2
    assert "link_gbps must be > 0" in _one_error_line(result)
    result = invoke("/no/such/dir")
    assert result.exit_code == 2
    assert "telemetry source not found" in _one_error_line(result)


@pytest.mark.parametrize(("args", "message"), [
    (["--start", "2024-11-18T02:00:00Z", "--end", "2024-11-18T01:00:00Z"],
     "--start must be before --end"),
    (["--end", "2024-11-18T01:00:00Z"], "--start is required"),
    (["--start", "yesterday"], "--start: 'yesterday' is not unix seconds or ISO-8601"),
])
def test_bad_time_range(args: list[str], message: str) -> None:
    result = invoke("--prometheus", "http://127.0.0.1:9", *args)
    assert result.exit_code == 2
    assert message in _one_error_line(result)


def test_unreachable_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainguard.telemetry, "PrometheusClient",
                        functools.partial(trainguard.telemetry.PrometheusClient, retries=0))
    result = invoke("--prometheus", "http://127.0.0.1:9", "--start", str(CFG.start_s),
                    "--end", str(CFG.start_s + 3600))
    assert result.exit_code == 2
    assert _one_error_line(result).startswith("error: cannot reach Prometheus at http://127")
    assert result.stdout == ""


def test_help_names_the_options() -> None:
    result = runner.invoke(app, ["ckpt", "analyze", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for option in ("--prometheus", "--link-gbps", "--node", "--min-duration", "--json",
                   "--net-device", "--min-rate"):
        assert option in text
