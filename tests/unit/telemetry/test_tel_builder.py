"""TelemetryBuilder: grid, step inference, merging, attribute labels, jobs, warnings."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from trainguard.errors import TelemetryError
from trainguard.telemetry import Entity, MetricKind, TelemetryBuilder, entity_sort_key

# These tests place samples at small synthetic times (0, 30, ...); the epoch-range check on
# ingestion has its own tests in test_tel_limits.py.
_builder = functools.partial(TelemetryBuilder, time_range_s=None)

N1 = {"Hostname": "n1"}


def _arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def test_grid_is_epoch_aligned_and_samples_go_to_the_next_point() -> None:
    b = _builder(step_s=30)
    b.add_series("g", MetricKind.GAUGE, N1, _arr(1007, 1016, 1044, 1081), _arr(1, 2, 3, 4))
    tel = b.build()
    assert tel.step_s == 30
    # each sample at the first grid point at or after it (never stamped before it was taken)
    assert tel.times.tolist() == [1020, 1050, 1080, 1110]
    assert (tel.times % 30 == 0).all()
    # 1007 and 1016 both land on 1020: the later sample wins; nothing in (1050, 1080]
    assert np.array_equal(tel.metrics[0].values, [[2.0, 3.0, np.nan, 4.0]], equal_nan=True)


def test_a_sample_on_a_grid_point_stays_there() -> None:
    b = _builder(step_s=30)
    b.add_series("g", MetricKind.GAUGE, N1, _arr(1020, 1050.0000001, 1080), _arr(1, 2, 3))
    assert b.build().times.tolist() == [1020, 1050, 1080]


@pytest.mark.parametrize(("ts", "step"), [
    ([0, 15, 30, 45, 60], 15),
    ([0, 29.6, 60.2, 90.1, 119.8], 30),
    ([0, 0.2, 0.4], 1),  # sub-second spacing rounds to the 1 s minimum
    ([5], 1),  # a single sample: nothing to infer from
])
def test_step_inference(ts: list[float], step: int) -> None:
    b = _builder()
    b.add_series("g", MetricKind.GAUGE, N1, np.array(ts, float), np.ones(len(ts)))
    assert b.build().step_s == step


def test_step_is_median_over_series_and_unsorted_input_is_sorted() -> None:
    b = _builder()
    b.add_series("g", MetricKind.GAUGE, N1, _arr(60, 0, 30, 90), _arr(3, 1, 2, 4))
    b.add_series("g", MetricKind.GAUGE, {"Hostname": "n2"}, _arr(0, 10), _arr(1, 1))
    tel = b.build()
    assert tel.step_s == 30
    assert tel.metrics[0].values[0].tolist() == [1, 2, 3, 4]


def test_duplicate_series_merge_later_added_wins_on_equal_time() -> None:
    b = _builder(step_s=10)
    b.add_series("g", MetricKind.GAUGE, {"Hostname": "n1", "gpu": "0"}, _arr(0, 10), _arr(1, 2))
    b.add_series("g", MetricKind.GAUGE, {"hostname": "n1", "gpu": "0", "UUID": "GPU-1"},
                 _arr(10, 20), _arr(20, 30))
    b.add_series("g", MetricKind.GAUGE, {"Hostname": "n1", "gpu": "0"}, _arr(19), _arr(99))
    tel = b.build()
    (m,) = tel.metrics
    assert m.entities == (Entity("n1", "0"),)
    # t=10: both equal, later added wins; t=20: 19 and 20 land there, later time wins
    assert m.values.tolist() == [[1.0, 20.0, 30.0]]


def test_nan_samples_never_overwrite_values() -> None:
    b = _builder(step_s=10)
    b.add_series("g", MetricKind.GAUGE, N1, _arr(0, 2, 10), _arr(5, np.nan, np.nan))
    vals = b.build().metrics[0].values[0]
    assert vals[0] == 5 and np.isnan(vals[1])


def test_attribute_labels_dropped_dimension_labels_kept() -> None:
    b = _builder(step_s=10)
    for node, kernel in (("n1", "5.15"), ("n2", "6.1")):
        for cpu in ("0", "1"):
            b.add_series("node_cpu_seconds_total", MetricKind.COUNTER,
                         {"instance": f"{node}:9100", "cpu": cpu, "kernel": kernel},
                         _arr(0, 10), _arr(1, 2))
    tel = b.build()
    assert [m.name for m in tel.metrics] == [
        'node_cpu_seconds_total{cpu="0"}', 'node_cpu_seconds_total{cpu="1"}']
    assert tel.metrics[0].entities == (Entity("n1"), Entity("n2"))
    assert tel.metrics[0].kind is MetricKind.COUNTER
    assert "node_cpu_seconds_total:kernel" in b.last_stats.dropped_attribute_labels


def test_label_present_for_only_some_series_of_an_entity_splits() -> None:
    b = _builder(step_s=10)
    b.add_series("m", MetricKind.GAUGE, {"node": "n1"}, _arr(0), _arr(1))
    b.add_series("m", MetricKind.GAUGE, {"node": "n1", "mode": "idle"}, _arr(0), _arr(2))
    assert [m.name for m in b.build().metrics] == ["m", 'm{mode="idle"}']


def test_kinds() -> None:
    b = _builder(step_s=10)
    b.add_series("a_total", MetricKind.UNKNOWN, N1, _arr(0), _arr(1))
    b.add_series("b", MetricKind.GAUGE, N1, _arr(0), _arr(1))
    b.add_series("c", MetricKind.UNKNOWN, N1, _arr(0), _arr(1))
    b.add_series("d", MetricKind.COUNTER, N1, _arr(0), _arr(1))
    kinds = {m.name: m.kind for m in b.build().metrics}
    assert kinds == {"a_total": MetricKind.COUNTER, "b": MetricKind.GAUGE,
                     "c": MetricKind.UNKNOWN, "d": MetricKind.COUNTER}


def test_series_without_node_are_counted_and_reported() -> None:
    b = _builder(step_s=10)
    b.add_series("orphan", MetricKind.GAUGE, {"gpu": "0"}, _arr(0), _arr(1))
    b.add_series("orphan", MetricKind.GAUGE, {"gpu": "1"}, _arr(0), _arr(1))
    with pytest.raises(TelemetryError, match=r"no series carries a node label .*Hostname.*"
                       r"the 2 series read carry: gpu\. .*--node-label"):
        b.build()
    b.add_series("g", MetricKind.GAUGE, N1, _arr(0), _arr(1))
    b.build()
    assert b.last_stats.series_without_node == 2
    assert any("orphan" in w and "Hostname" in w for w in b.last_stats.warnings)


def test_empty_input_and_shape_mismatch() -> None:
    with pytest.raises(TelemetryError, match="no samples"):
        _builder().build()
    with pytest.raises(TelemetryError, match="differ in shape"):
        _builder().add_series("g", MetricKind.GAUGE, N1, _arr(0, 1), _arr(1))
    with pytest.raises(TelemetryError, match="step"):
        _builder(step_s=0)


def test_jobs_per_node_per_grid_point() -> None:
    b = _builder(step_s=10)
    b.add_series("g", MetricKind.GAUGE, {"Hostname": "n1", "gpu": "0", "hpc_job": "j1"},
                 _arr(0, 10), _arr(1, 1))
    b.add_series("g", MetricKind.GAUGE, {"Hostname": "n1", "gpu": "0", "hpc_job": "j2"},
                 _arr(30), _arr(1))
    b.add_series("g", MetricKind.GAUGE, {"Hostname": "n2", "gpu": "0"}, _arr(0, 30), _arr(1, 1))
    tel = b.build()
    assert tel.jobs == {"n1": ("j1", "j1", "", "j2")}
    # the job label splits nothing: one series per entity
    assert tel.metrics[0].name == "g"
    assert tel.metrics[0].values[0].tolist()[:2] == [1.0, 1.0]


def test_bounded_build_drops_and_counts_outside_samples() -> None:
    b = _builder(step_s=10)
    b.add_series("g", MetricKind.GAUGE, N1, _arr(0, 10, 20, 30), _arr(0, 1, 2, 3))
    tel = b.build(start_s=5, end_s=30)
    assert tel.times.tolist() == [10, 20]
    assert tel.metrics[0].values.tolist() == [[1.0, 2.0]]
    assert b.last_stats.samples_outside_grid == 2


def test_entity_order_is_natural() -> None:
    ents = [Entity("n1", "10"), Entity("n1", "2"), Entity("n1"), Entity("n0", "GPU-x")]
    assert sorted(ents, key=entity_sort_key) == [
        Entity("n0", "GPU-x"), Entity("n1"), Entity("n1", "2"), Entity("n1", "10")]


def test_many_series_vectorised() -> None:
    rng = np.random.default_rng(0)
    b = _builder()
    ts = np.arange(0, 30 * 2000, 30, dtype=np.float64)
    for n in range(50):
        for g in range(8):
            b.add_series("temp", MetricKind.GAUGE, {"Hostname": f"n{n:02d}", "gpu": str(g)},
                         ts - rng.uniform(0, 6, ts.size), rng.normal(40, 1, ts.size))
    tel = b.build()
    (m,) = tel.metrics
    assert m.values.shape == (400, 2000)  # up to 6 s early (a scrape phase): the next point
    assert tel.n_samples == 400 * 2000
