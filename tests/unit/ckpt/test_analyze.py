"""Checkpoint phases in constructed NFS counters: found where they were put, measured right."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainguard.ckpt.analyze import (
    NET_TRANSMIT,
    OP_QUEUE_TIME,
    OP_REQUEST_TIME,
    OP_RESPONSE_TIME,
    OP_SENT_BYTES,
    READ_BYTES,
    WRITE_BYTES,
    AnalyzeConfig,
    PhaseKind,
    analyze,
    prometheus_selectors,
    utilization_pct,
)
from trainguard.ckpt.phases import (
    PhaseConfig,
    close_gaps,
    fill_gaps,
    find_phases,
    rolling_median,
    runs,
)
from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry import Entity, MetricKind, MetricSeries, Telemetry, render_key

STEP = 30
T0 = 1_731_888_000
N_T = 720  # 6 hours
GBIT = 1e9 / 8  # bytes/s in one Gbit/s
NODES = ("node01", "node02", "node03")


def _noise(seed: int, shape: tuple[int, ...], level: float, rel: float = 0.1) -> np.ndarray:
    return level * np.exp(rel * np.random.default_rng(seed).standard_normal(shape))


def _counter(name: str, rates: np.ndarray, nodes: tuple[str, ...] = NODES,
             labels: tuple[tuple[str, str], ...] = ()) -> MetricSeries:
    """A cumulative counter whose per-step rate at sample t (t >= 1) is rates[:, t]."""
    values = 1e12 + np.cumsum(rates * STEP, axis=1)
    return MetricSeries(render_key(name, labels), MetricKind.COUNTER,
                        tuple(Entity(n) for n in nodes), values)


def _tel(*series: MetricSeries) -> Telemetry:
    n_t = series[0].values.shape[1]
    return Telemetry(T0 + np.arange(n_t, dtype=np.int64) * STEP, STEP, series)


def _t(sample: int) -> float:
    return float(T0 + sample * STEP)


WRITE_OP = (("operation", "WRITE"),)
READ_OP = (("operation", "READ"),)


# --- phases.py building blocks ------------------------------------------------------------------


def test_runs_and_close_gaps() -> None:
    mask = np.array([0, 1, 1, 0, 1, 0, 0, 0, 1, 0], dtype=bool)
    assert runs(mask) == [(1, 2), (4, 4), (8, 8)]
    assert runs(close_gaps(mask, 1)) == [(1, 4), (8, 8)]
    assert runs(close_gaps(mask, 3)) == [(1, 8)]
    assert runs(np.zeros(4, dtype=bool)) == []


def test_fill_gaps_takes_the_later_rate_but_not_before_the_first_sample() -> None:
    x = np.array([[np.nan, 1.0, np.nan, np.nan, 4.0, np.nan, np.nan, np.nan, 8.0, np.nan]])
    got = fill_gaps(x, 2)
    np.testing.assert_array_equal(
        got, [[np.nan, 1.0, 4.0, 4.0, 4.0, np.nan, np.nan, np.nan, 8.0, np.nan]])


def test_rolling_median_follows_a_level_step_but_not_a_short_burst() -> None:
    x = np.concatenate([np.full(200, 1.0), np.full(200, 100.0)])[None, :]
    x[0, 100:110] = 1e6
    med = rolling_median(x, 61)
    assert np.all(med[0, :190] == 1.0)
    assert np.all(med[0, 215:] == 100.0)
    x[0, :] = np.nan
    assert np.isnan(rolling_median(x, 61, min_count=1)).all()


# --- finding saves ------------------------------------------------------------------------------


def _two_saves() -> np.ndarray:
    """node01 10 Gbit/s and node02 20 Gbit/s in two saves; node03 only writes logs."""
    r = _noise(1, (3, N_T), 1e5)
    r[0, 100:110] = 10 * GBIT  # samples 100..109: the save covers (T(99), T(109)]
    r[1, 100:110] = 20 * GBIT
    r[0, 400:406] = 5 * GBIT
    r[1, 402:406] = 15 * GBIT
    return r


def test_known_saves_are_found_with_bytes_bandwidth_and_utilization() -> None:
    r = _two_saves()
    result = analyze(_tel(_counter(WRITE_BYTES, r)))

    assert result.save_source == WRITE_BYTES
    assert [p.kind for p in result.phases] == [PhaseKind.SAVE, PhaseKind.SAVE]
    first, second = result.phases

    assert (first.start, first.end, first.duration_s) == (_t(99), _t(109), 300.0)
    assert first.node_names == ("node01", "node02")
    assert first.nbytes == pytest.approx((10 + 20) * GBIT * 300)
    assert first.mean_bps == pytest.approx(30 * GBIT)
    assert first.peak_bps == pytest.approx(30 * GBIT)
    n1, n2 = first.nodes
    assert n1.nbytes == pytest.approx(10 * GBIT * 300)
    assert (n1.mean_bps, n1.peak_bps) == (pytest.approx(10 * GBIT), pytest.approx(10 * GBIT))
    assert (n1.util_mean_pct, n2.util_mean_pct) == (pytest.approx(5.0), pytest.approx(10.0))
    assert first.util_mean_pct == pytest.approx(7.5)  # mean of the nodes' means
    assert first.util_peak_pct == pytest.approx(10.0)

    # Staggered: node02 starts 2 samples after node01; each node is measured over its own span.
    assert (second.start, second.end) == (_t(399), _t(405))
    a, b = second.nodes
    assert (a.start, a.end, b.start, b.end) == (_t(399), _t(405), _t(401), _t(405))
    assert b.mean_bps == pytest.approx(15 * GBIT)
    assert second.nbytes == pytest.approx(5 * GBIT * 180 + 15 * GBIT * 120)
    assert second.mean_bps == pytest.approx(second.nbytes / 180)
    assert second.peak_bps == pytest.approx(20 * GBIT)

    s = result.summary
    assert (s.saves, s.loads, s.median_save_s) == (2, 0, 240.0)
    assert s.save_util_min_pct == pytest.approx(2.5)
    assert s.save_util_max_pct == pytest.approx(10.0)
    assert s.save_queue_share is None
    assert result.nodes == NODES


@pytest.mark.parametrize("link_gbps", [100.0, 200.0, 400.0])
def test_utilization_is_relative_to_the_configured_link(link_gbps: float) -> None:
    result = analyze(_tel(_counter(WRITE_BYTES, _two_saves())), AnalyzeConfig(link_gbps))
    assert result.phases[0].nodes[0].util_mean_pct == pytest.approx(10 / link_gbps * 100)
    assert utilization_pct(25e9, 200) == pytest.approx(100.0)


@pytest.mark.parametrize(("level", "rel"), [(1e5, 0.3), (1e7, 0.5), (4e8, 0.1)])
def test_noise_is_not_a_phase(level: float, rel: float) -> None:
    """Log-normal noise around a quiet, a busy, and a very busy (400 MB/s) baseline."""
    r = _noise(7, (3, N_T), level, rel)
    result = analyze(_tel(_counter(WRITE_BYTES, r), _counter(READ_BYTES, r[::-1].copy())))
    assert result.phases == ()
    assert result.summary.saves == result.summary.loads == 0


def test_a_small_rise_below_the_absolute_floor_is_not_a_phase() -> None:
    r = _noise(3, (3, N_T), 1e5, 0.01)
    r[:, 200:220] = 30e6  # 30 MB/s: far above the noise, below the 50 MB/s floor
    assert analyze(_tel(_counter(WRITE_BYTES, r))).phases == ()
    lower = AnalyzeConfig(phases=PhaseConfig(min_rate_bps=10e6))
    assert len(analyze(_tel(_counter(WRITE_BYTES, r)), lower).phases) == 1


def test_a_rise_to_less_than_twice_a_busy_baseline_is_not_a_phase() -> None:
    r = _noise(16, (3, N_T), 300e6, 0.02)  # a steady 300 MB/s of dataset reads
    r[:, 200:220] = 480e6  # 1.6x: far above the noise and the floor, but not a burst
    assert analyze(_tel(_counter(READ_BYTES, r))).phases == ()
    looser = AnalyzeConfig(phases=PhaseConfig(min_ratio=1.5))
    assert len(analyze(_tel(_counter(READ_BYTES, r)), looser).loads) == 1


@pytest.mark.parametrize(("dip", "expected"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_dips_up_to_max_gap_are_merged(dip: int, expected: int) -> None:
    r = _noise(2, (3, N_T), 1e5)
    r[:2, 100:110] = 8 * GBIT
    r[:2, 110 + dip:120 + dip] = 8 * GBIT
    result = analyze(_tel(_counter(WRITE_BYTES, r)))  # max_gap_s = 60 s = 2 samples
    assert len(result.phases) == expected
    if expected == 1:
        only = result.phases[0]
        assert (only.start, only.end) == (_t(99), _t(119 + dip))
        assert only.nodes[0].nbytes == pytest.approx(8 * GBIT * 20 * STEP, rel=1e-3)


def test_short_phases_are_dropped_unless_min_duration_allows() -> None:
    r = _noise(4, (3, N_T), 1e5)
    r[0, 300] = 10 * GBIT  # one sample: 30 s
    assert analyze(_tel(_counter(WRITE_BYTES, r))).phases == ()
    keep = AnalyzeConfig(phases=PhaseConfig(min_duration_s=30))
    (phase,) = analyze(_tel(_counter(WRITE_BYTES, r)), keep).phases
    assert (phase.start, phase.end, phase.node_names) == (_t(299), _t(300), ("node01",))


def test_reads_are_loads_and_writes_are_saves() -> None:
    w = _noise(5, (3, N_T), 1e5)
    rd = _noise(6, (3, N_T), 2e7)  # steady dataset reads
    w[:, 500:510] = 4 * GBIT
    rd[:, 50:70] = 16 * GBIT  # the job start reads its checkpoint
    result = analyze(_tel(_counter(WRITE_BYTES, w), _counter(READ_BYTES, rd)))

    assert result.load_source == READ_BYTES
    assert [(p.kind, p.start, p.end) for p in result.phases] == [
        (PhaseKind.LOAD, _t(49), _t(69)), (PhaseKind.SAVE, _t(499), _t(509))]
    assert result.loads[0].util_mean_pct == pytest.approx(8.0)
    assert result.summary.median_load_s == 600.0
    assert (result.summary.saves, result.summary.loads) == (1, 1)


def test_a_level_shift_is_not_a_load_but_a_burst_on_top_of_it_is() -> None:
    rd = _noise(8, (3, N_T), 1e4)
    rd[:, 240:] = _noise(9, (3, N_T - 240), 300e6)  # a job starts streaming its dataset
    rd[:, 240:260] = 2.5e9  # and first loads the checkpoint
    (load,) = analyze(_tel(_counter(READ_BYTES, rd))).phases
    assert (load.kind, load.start, load.end) == (PhaseKind.LOAD, _t(239), _t(259))


def test_missing_samples_inside_a_save_keep_it_whole_and_the_bytes_right() -> None:
    r = _noise(10, (3, N_T), 1e5)
    r[:, 100:120] = 6 * GBIT
    c = _counter(WRITE_BYTES, r)
    c.values[:, 105:108] = np.nan  # three missed scrapes mid-save
    (phase,) = analyze(_tel(c)).phases
    assert (phase.start, phase.end) == (_t(99), _t(119))
    assert phase.nbytes == pytest.approx(3 * 6 * GBIT * 20 * STEP, rel=1e-4)


def test_a_counter_reset_is_not_a_phase() -> None:
    r = _noise(11, (3, N_T), 1e5)
    c = _counter(WRITE_BYTES, r)
    c.values[1, 300:] -= c.values[1, 299]  # node02 rebooted: its counter restarts near 0
    assert analyze(_tel(c)).phases == ()


def test_the_mounts_of_a_node_are_summed() -> None:
    a = _noise(12, (3, N_T), 1e5)
    b = _noise(13, (3, N_T), 1e5)
    a[0, 100:110] = 2 * GBIT
    b[0, 100:110] = 3 * GBIT
    tel = _tel(_counter(WRITE_BYTES, a, labels=(("export", "nfs01:/ckpt"),)),
               _counter(WRITE_BYTES, b, labels=(("export", "nfs02:/ckpt"),)))
    (phase,) = analyze(tel).phases
    assert phase.nodes[0].mean_bps == pytest.approx(5 * GBIT, rel=1e-4)


# --- queue share --------------------------------------------------------------------------------


def _with_timings(queue: float, request: float | None, response: float | None,
                  ) -> Telemetry:
    w = _noise(14, (3, N_T), 1e5)
    w[:2, 100:110] = 5 * GBIT
    busy = np.zeros((3, N_T))
    busy[:2, 100:110] = 1.0
    idle = 0.001 * np.ones((3, N_T))  # a trickle of log writes outside the save
    series = [_counter(WRITE_BYTES, w),
              _counter(OP_QUEUE_TIME, busy * queue + idle * 0.1, labels=WRITE_OP),
              _counter(OP_QUEUE_TIME, busy * 0.01, labels=READ_OP)]
    if request is not None:
        series.append(_counter(OP_REQUEST_TIME, busy * request + idle, labels=WRITE_OP))
    if response is not None:
        series.append(_counter(OP_RESPONSE_TIME, busy * response + idle * 0.9,
                               labels=WRITE_OP))
    return _tel(*series)


def test_queue_share_blames_client_side_queueing() -> None:
    # 128 RPC slots busy for the whole save: 93 s of every 100 s of WRITE time is queueing.
    result = analyze(_with_timings(queue=930.0, request=1000.0, response=60.0))
    (phase,) = result.phases
    assert phase.queue_share == pytest.approx(0.93)
    assert phase.queue_s == pytest.approx(2 * 10 * STEP * 930.0)
    assert "client-side queueing" in phase.hint and "trainguard nfs diagnose" in phase.hint
    assert result.summary.save_queue_share == pytest.approx(0.93)
    assert "trainguard nfs diagnose" in result.summary.hint


def test_queue_share_without_request_time_uses_queue_plus_response() -> None:
    (phase,) = analyze(_with_timings(queue=100.0, request=None, response=300.0)).phases
    assert phase.queue_share == pytest.approx(0.25, rel=1e-4)
    assert "client-side" not in phase.hint
    assert "25% queued" in phase.hint


def test_no_timings_no_queue_share() -> None:
    result = analyze(_with_timings(queue=1.0, request=None, response=None))
    assert result.phases[0].queue_share is None
    assert result.phases[0].hint == ""
    assert "collector.mountstats" in result.summary.hint


# --- sources, filters, errors -------------------------------------------------------------------


def test_falls_back_to_the_write_operation_bytes() -> None:
    r = _two_saves()
    result = analyze(_tel(_counter(OP_SENT_BYTES, r, labels=WRITE_OP),
                          _counter(OP_SENT_BYTES, r * 1000, labels=READ_OP)))
    assert result.save_source == f'{OP_SENT_BYTES}{{operation="WRITE"}}'
    assert result.load_source is None
    assert result.phases[0].nodes[0].mean_bps == pytest.approx(10 * GBIT)


def test_falls_back_to_the_configured_network_device() -> None:
    r = _two_saves()
    ib = _noise(15, (3, N_T), 2e9)  # training traffic on the other device
    tel = _tel(_counter(NET_TRANSMIT, r, labels=(("device", "eth0"),)),
               _counter(NET_TRANSMIT, ib, labels=(("device", "ib0"),)))
    with pytest.raises(TelemetryError, match="--net-device"):
        analyze(tel)
    result = analyze(tel, AnalyzeConfig(net_device="eth0"))
    assert result.save_source == f'{NET_TRANSMIT}{{device="eth0"}}'
    assert len(result.saves) == 2
    with pytest.raises(TelemetryError, match="devices with node_network_\\* counters: eth0, ib0"):
        analyze(tel, AnalyzeConfig(net_device="bond0"))


def test_no_byte_counters_names_what_was_looked_for() -> None:
    temp = MetricSeries("node_hwmon_temp_celsius", MetricKind.GAUGE,
                        tuple(Entity(n) for n in NODES), np.full((3, 10), 40.0))
    with pytest.raises(TelemetryError, match=f"no NFS byte counters found \\(looked for "
                       f"{WRITE_BYTES}, .*{READ_BYTES}"):
        analyze(_tel(temp))


def test_node_filter() -> None:
    tel = _tel(_counter(WRITE_BYTES, _two_saves()))
    result = analyze(tel, AnalyzeConfig(nodes=("node02", "node03")))
    assert result.nodes == ("node02", "node03")
    assert [p.node_names for p in result.phases] == [("node02",), ("node02",)]
    assert analyze(tel, AnalyzeConfig(nodes=("node0[13]",))).nodes == ("node01", "node03")
    with pytest.raises(ConfigError, match="no node matches gpu\\*"):
        analyze(tel, AnalyzeConfig(nodes=("gpu*",)))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"link_gbps": 0.0}, "ckpt.analyze.link_gbps must be > 0"),
    ({"link_gbps": float("nan")}, "ckpt.analyze.link_gbps"),
    ({"queue_hint_share": 1.5}, "ckpt.analyze.queue_hint_share"),
    ({"net_device": ""}, "ckpt.analyze.net_device"),
    ({"nodes": "node01"}, "ckpt.analyze.nodes"),
])
def test_analyze_config_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AnalyzeConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"k_mad": -1.0}, "ckpt.analyze.k_mad"),
    ({"min_duration_s": float("inf")}, "ckpt.analyze.min_duration_s"),
    ({"baseline_window_s": 0.0}, "ckpt.analyze.baseline_window_s"),
    ({"min_ratio": 0.5}, "ckpt.analyze.min_ratio must be >= 1"),
    ({"k_mad": 0.0, "min_rate_bps": 0.0, "min_ratio": 1.0}, "cannot all be 0"),
])
def test_phase_config_validation(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PhaseConfig(**kwargs)


def test_find_phases_rejects_a_bad_step() -> None:
    with pytest.raises(ConfigError, match="step"):
        find_phases(np.zeros((1, 4)), 0, PhaseConfig())


def test_to_dict_is_json() -> None:
    result = analyze(_with_timings(queue=930.0, request=1000.0, response=60.0))
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["summary"]["saves"] == 1
    assert doc["phases"][0]["kind"] == "save"
    assert doc["phases"][0]["queue_share"] == pytest.approx(0.93)
    assert [n["node"] for n in doc["phases"][0]["nodes"]] == ["node01", "node02"]


def test_prometheus_selectors_cover_the_metrics_used() -> None:
    sel = prometheus_selectors()
    assert sel[:2] == [WRITE_BYTES, READ_BYTES]
    assert f'{OP_QUEUE_TIME}{{operation=~"READ|WRITE"}}' in sel
    assert NET_TRANSMIT not in sel
    assert NET_TRANSMIT in prometheus_selectors("eth0")
