"""The generated arrays: shapes, synchrony within jobs, precursors, failures stopping jobs."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import SMALL

from trainguard.simulate import SimChunk, SimConfig, build_scenario, generate
from trainguard.telemetry.frame import MetricKind


@pytest.fixture(scope="module")
def chunks() -> list[SimChunk]:
    return list(generate(SMALL))


def _metric(chunks: list[SimChunk], name: str) -> np.ndarray:
    return np.concatenate([next(b for b in c.metrics if b.spec.name == name).values
                           for c in chunks], axis=1)


def test_chunks_cover_the_span_in_order(chunks: list[SimChunk]) -> None:
    times = np.concatenate([c.times for c in chunks])
    assert times[0] >= SMALL.start_s and times[-1] < SMALL.end_s
    assert np.all(np.diff(times) == SMALL.interval_s)
    assert len(chunks) == SMALL.n_windows
    g = SMALL.nodes * SMALL.gpus_per_node
    for c in chunks:
        assert c.node_job.shape == (SMALL.nodes, c.times.size)
        for b in c.metrics:
            rows = g if b.spec.per_gpu else SMALL.nodes * len(b.spec.variants)
            assert b.values.shape == (rows, c.times.size) == (len(b.entities), c.times.size)


def test_generate_is_deterministic(chunks: list[SimChunk]) -> None:
    again = list(generate(SMALL))
    for a, b in zip(chunks, again, strict=True):
        for ma, mb in zip(a.metrics, b.metrics, strict=True):
            np.testing.assert_array_equal(ma.values, mb.values)


def test_to_telemetry_splits_variants(chunks: list[SimChunk]) -> None:
    tel = chunks[0].to_telemetry(with_jobs=True)
    assert tel.metric("DCGM_FI_DEV_GPU_TEMP") is not None
    eth = tel.metric('node_network_receive_bytes_total{device="eth0"}')
    assert eth is not None and eth.kind is MetricKind.COUNTER
    assert len(eth.entities) == SMALL.nodes
    assert tel.metric("DCGM_FI_DEV_PCIE_REPLAY_COUNTER").kind is MetricKind.MONOTONIC  # type: ignore[union-attr]
    assert set(tel.jobs) == set(SMALL.node_names)


def test_nodes_of_a_job_move_together() -> None:
    cfg = SimConfig(nodes=8, gpus_per_node=2, days=1, seed=4, failures_per_day=0,
                    app_xids_per_day=0, benign_per_day=0, missing_sample_prob=0,
                    scrape_gaps_per_day=0, maintenances_per_day=0)
    sc = build_scenario(cfg)
    chunks = list(generate(cfg, sc))
    times = np.concatenate([c.times for c in chunks])
    util = _metric(chunks, "DCGM_FI_DEV_GPU_UTIL")
    job = next(j for j in sc.jobs if len(j.nodes) >= 2 and j.end_s - j.start_s > 4 * 3600
               and j.start_s >= cfg.start_s and j.end_s <= cfg.end_s)
    sel = (times >= job.start_s + 900) & (times < job.end_s)
    a, b = util[job.nodes[0] * 2, sel], util[job.nodes[1] * 2, sel]
    assert np.corrcoef(a, b)[0, 1] > 0.8  # checkpoint dips at the same instants
    assert (a < 30).any() and np.median(a) > 70
    idle = [n for n in range(cfg.nodes) if not any(
        n in j.nodes and j.start_s < cfg.end_s and j.end_s > cfg.start_s for j in sc.jobs)]
    for n in idle:
        assert np.nanmax(util[n * 2]) == 0


@pytest.mark.parametrize(("shape", "metric"), [
    ("pcie_replay", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
    ("ecc_sbe", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    ("nvlink_crc", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"),
])
def test_counter_precursors_climb_before_the_xid(shape: str, metric: str) -> None:
    for seed in range(40):
        cfg = SimConfig(nodes=4, gpus_per_node=2, days=1, seed=seed, failures_per_day=8,
                        no_precursor_fraction=0, benign_per_day=0, missing_sample_prob=0,
                        scrape_gaps_per_day=0)
        sc = build_scenario(cfg)
        hits = [f for f in sc.failures if f.precursor == shape
                and f.precursor_start_s is not None and f.precursor_start_s > cfg.start_s
                and f.time_s - f.precursor_start_s > 1800 and f.magnitude > 0.5]
        if hits:
            break
    else:
        pytest.fail(f"no {shape} precursor drawn in 40 seeds")
    f = hits[0]
    chunks = list(generate(cfg, sc))
    times = np.concatenate([c.times for c in chunks])
    v = _metric(chunks, metric)[f.node * 2 + f.gpus[0]]
    pre = (times >= f.precursor_start_s) & (times < f.time_s) & ~np.isnan(v)
    assert v[pre][-1] - v[pre][0] >= 5
    assert np.nanmax(np.diff(v[pre])) > np.nanmax(np.diff(v[pre][:5]))


def test_failure_stops_every_node_of_its_job() -> None:
    cfg = SimConfig(nodes=16, gpus_per_node=2, days=1, seed=2, failures_per_day=10,
                    missing_sample_prob=0, scrape_gaps_per_day=0)
    sc = build_scenario(cfg)
    cut = [j for j in sc.jobs if j.end_reason == "hw_failure" and len(j.nodes) > 1
           and j.end_s < cfg.end_s - 600]
    assert cut
    chunks = list(generate(cfg, sc))
    times = np.concatenate([c.times for c in chunks])
    util = _metric(chunks, "DCGM_FI_DEV_GPU_UTIL")
    j = cut[0]
    k = int(np.searchsorted(times, j.end_s))
    for n in j.nodes:
        assert np.nansum(util[n * 2:(n + 1) * 2, k + 1:k + 3]) == 0
