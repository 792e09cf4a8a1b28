"""A hardware XID that NVIDIA's catalog does not call fatal (excessive single-bit interrupts,
XID 92; an XID the catalog does not list) warns at once, as a predictive alert; it is never hard
evidence, which would stop a job (`trainguard run --alerts`) or drain the node (`watch`
actions): the same XID in a kernel log stops no job either. A row remapped to a spare (XID 63)
is a watch: it warns once its GPU confirms it (`confirm.py`)."""

from __future__ import annotations

import numpy as np
import pytest
from test_detector import Cluster

from trainguard.detect import AlertKind, detect
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import EpisodeTracker
from trainguard.detect.knowledge import is_fatal_hardware_xid
from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.signals.hard_evidence import HardEvidence, emit, repairs, warn
from trainguard.evidence.rules import load_rules
from trainguard.evidence.scanner import scan_bytes
from trainguard.recover.failure import is_node_fault
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

LAY = Layout(gpu_metrics=["DCGM_FI_DEV_XID_ERRORS"], node_metrics=[], nodes=["a", "b"],
             gpu_labels=[["0", "1"]] * 2, _slots=[{"0": 0, "1": 1}] * 2)


@pytest.mark.parametrize(("xid", "fatal"), [(79, True), (48, True), (95, True), (63, False),
                                            (92, False), (94, False), (250, False)])
def test_the_catalog_says_which_hardware_xids_are_hard(xid: int, fatal: bool) -> None:
    assert is_fatal_hardware_xid(xid) is fatal


def _hits(xids: dict[tuple[int, int, int], float]) -> tuple[list, np.ndarray]:
    gpu = np.zeros((1, 2, 2, 12))
    for (node, g, t), v in xids.items():
        gpu[0, node, g, t:] = v
    times = 1_000_000 + 30 * np.arange(12, dtype=np.int64)
    d = DenseChunk(times, gpu, np.zeros((0, 2, 12)))
    return HardEvidence().scan(d, LAY, np.ones((2, 2, 12), dtype=bool), 30), times


def test_a_non_fatal_xid_warns_or_joins_the_open_hard_alert() -> None:
    # node a: XID 92 and nothing else; node b: a fatal XID, then a non-fatal one on another GPU
    hits, times = _hits({(0, 1, 5): 92.0, (1, 0, 9): 79.0, (1, 1, 10): 94.0})
    assert [(h.t_index, h.node, h.fatal, h.repair) for h in hits] == [
        (5, 0, False, False), (9, 1, True, False), (10, 1, False, False)]
    tracker = EpisodeTracker(DetectorConfig(), LAY.nodes)
    emit(tracker, [h for h in hits if h.fatal], times, LAY)
    ((node, sig),) = warn(tracker, [h for h in hits if not h.fatal], times, LAY)
    assert node == 0 and sig.gpu == "1"
    assert sig.detail == "XID 92, non-fatal (EXCESSIVE_SBE_INTERRUPTS): a warning"
    assert [s.detail[:16] for s in tracker.hard[1].signals] == ["XID 79", "XID 94, non-fata"]
    assert 0 not in tracker.hard  # a warning never opens a hard alert


def test_a_row_remap_joins_the_open_hard_alert_and_otherwise_waits() -> None:
    """XID 63 is a repair: `warn` never returns it (it waits for its GPU to confirm it), but it
    still names the node's open hard alert (a double-bit error, then the row remapped)."""
    hits, times = _hits({(0, 1, 5): 63.0, (1, 0, 9): 48.0, (1, 0, 10): 63.0})
    assert [(h.t_index, h.node, h.fatal, h.repair) for h in hits] == [
        (5, 0, False, True), (9, 1, True, False), (10, 1, False, True)]
    tracker = EpisodeTracker(DetectorConfig(), LAY.nodes)
    emit(tracker, [h for h in hits if h.fatal], times, LAY)
    assert warn(tracker, [h for h in hits if not h.fatal], times, LAY) == []
    assert [s.detail[:16] for s in tracker.hard[1].signals] == ["XID 48", "XID 63, non-fata"]
    assert 0 not in tracker.hard
    watched = repairs(hits, LAY, s=4)
    assert {b: [(n, s.gpu) for n, s in v] for b, v in watched.items()} == {
        1: [(0, "1")], 2: [(1, "0")]}


def _with(c: Cluster, counters: dict[str, np.ndarray]) -> Telemetry:
    tel = c.telemetry()
    ents = tuple(Entity(f"node{i:02d}", str(j)) for i in range(c.n) for j in range(c.g))
    return Telemetry(tel.times, tel.step_s, (*tel.metrics, *(
        MetricSeries(name, MetricKind.COUNTER, ents, a.reshape(c.n * c.g, c.t).copy())
        for name, a in counters.items())))


def test_through_the_detector_a_lone_xid_63_stays_quiet_and_xid_79_is_hard() -> None:
    c = Cluster(seed=5)
    c.xid[2, 3, c.at(10):] = 63
    c.xid[6, 1, c.at(14):] = 79
    (hard,) = detect(c.telemetry())
    assert hard.node == "node06" and hard.kind is AlertKind.HARD


def test_a_row_remap_warns_when_its_gpu_logs_correctable_errors_before_or_after_it() -> None:
    c = Cluster(seed=5)
    sbe = np.zeros((c.n, c.g, c.t))
    c.xid[2, 3, c.at(10):] = 63
    sbe[2, 3, c.at(9):] += 1           # a correctable error an hour before the remap
    c.xid[4, 5, c.at(12):] = 63
    sbe[4, 5, c.at(12.8):] += 1        # one 48 minutes after it
    c.xid[7, 0, c.at(15):] = 63
    sbe[7, 0, c.at(15):] += 1          # only the error that made it remap the row
    alerts = {a.node: a for a in detect(_with(c, {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": sbe}))}
    assert set(alerts) == {"node02", "node04"}
    before, after = alerts["node02"], alerts["node04"]
    assert before.kind is after.kind is AlertKind.PREDICTIVE
    assert abs(before.start - c.times[c.at(10)]) <= 240
    assert before.signals[0].detail.endswith(
        "confirmed: more memory wear on this GPU 1.0 h earlier")
    assert abs(after.start - c.times[c.at(12.8)]) <= 240   # the warning waits for the error
    assert after.signals[0].gpu == "5" and "0.8 h later" in after.signals[0].detail


def test_a_second_remap_on_the_same_gpu_confirms_the_first() -> None:
    c = Cluster(seed=5)
    c.xid[3, 2, c.at(8):] = 63
    c.xid[3, 2, c.at(11):] = 0
    c.xid[3, 2, c.at(11.5):] = 63
    (warn_,) = detect(c.telemetry())
    assert warn_.node == "node03" and warn_.kind is AlertKind.PREDICTIVE
    assert abs(warn_.start - c.times[c.at(11.5)]) <= 240
    # the second remap confirms the first (3.5 h later) and is confirmed by it (3.5 h earlier)
    assert any("confirmed: another precursor on this GPU 3.5 h" in s.detail
               for s in warn_.signals)


def test_rows_remapped_in_a_burst_confirm_the_remap_the_xid_gauge_shows_once() -> None:
    """The XID gauge holds its last value: three remaps minutes apart are one change to 63.
    The remapped-rows counter counts each; its step beside the XID is the remap itself."""
    c = Cluster(seed=5)
    rows = np.zeros((c.n, c.g, c.t))
    rows[0, 0, c.at(1):] = 1           # a remap in the first hour: the counter is seen to count
    c.xid[1, 4, c.at(6):] = 63
    rows[1, 4, c.at(6):] += 1
    rows[1, 4, c.at(6.2):] += 1        # 12 minutes later, the gauge still at 63
    rows[1, 4, c.at(6.3):] += 1
    c.xid[5, 2, c.at(9):] = 63
    rows[5, 2, c.at(9):] += 1          # a lone remap, its own step
    (warn_,) = detect(_with(c, {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": rows}))
    assert warn_.node == "node01" and warn_.kind is AlertKind.PREDICTIVE
    assert abs(warn_.start - c.times[c.at(6.2)]) <= 240
    assert "more memory wear on this GPU 0.2 h later" in warn_.signals[0].detail


def test_a_count_first_seen_is_not_wear_that_confirms_a_remap() -> None:
    """A GPU that had logged correctable errors before the detector started is seen at that
    count: that is history, not an error an hour before the remap."""
    c = Cluster(seed=5)
    sbe = np.zeros((c.n, c.g, c.t))
    sbe[2, 3, :] = 5
    c.xid[2, 3, c.at(1):] = 63
    assert detect(_with(c, {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": sbe})) == []


def test_with_confirmation_off_a_row_remap_warns_at_once() -> None:
    c = Cluster(seed=5)
    c.xid[2, 3, c.at(10):] = 63
    (warn_,) = detect(c.telemetry(), DetectorConfig(precursor_confirm_s=0.0))
    assert warn_.node == "node02" and abs(warn_.start - c.times[c.at(10)]) <= 240
    assert "XID 63, non-fatal" in warn_.signals[0].detail and warn_.signals[0].gpu == "3"


def test_the_kernel_log_path_agrees() -> None:
    """In a kernel log, XID 63 stops no attempt and XID 79 does: the detector now agrees."""
    for xid, stops in ((63, False), (79, True)):
        line = f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, name=python, something\n"
        (ev,) = [e for e in scan_bytes(line.encode(), load_rules(), path="kern.log",
                                       first_line=1, host_hint="a") if e.xid == xid]
        assert is_node_fault(ev) is stops is is_fatal_hardware_xid(xid)
