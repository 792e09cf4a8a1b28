"""A hardware XID that NVIDIA's catalog does not call fatal (a row remapping recorded, XID 63;
an XID the catalog does not list) warns at once, as a predictive alert; it is never hard
evidence, which would stop a job (`trainguard run --alerts`) or drain the node (`watch`
actions): the same XID in a kernel log stops no job either."""

from __future__ import annotations

import numpy as np
import pytest
from test_detector import Cluster

from trainguard.detect import AlertKind, detect
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import EpisodeTracker
from trainguard.detect.knowledge import is_fatal_hardware_xid
from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.signals.hard_evidence import HardEvidence, emit, warn
from trainguard.evidence.rules import load_rules
from trainguard.evidence.scanner import scan_bytes
from trainguard.recover.failure import is_node_fault

LAY = Layout(gpu_metrics=["DCGM_FI_DEV_XID_ERRORS"], node_metrics=[], nodes=["a", "b"],
             gpu_labels=[["0", "1"]] * 2, _slots=[{"0": 0, "1": 1}] * 2)


@pytest.mark.parametrize(("xid", "fatal"), [(79, True), (48, True), (95, True), (63, False),
                                            (92, False), (94, False), (250, False)])
def test_the_catalog_says_which_hardware_xids_are_hard(xid: int, fatal: bool) -> None:
    assert is_fatal_hardware_xid(xid) is fatal


def test_a_non_fatal_xid_warns_or_joins_the_open_hard_alert() -> None:
    gpu = np.zeros((1, 2, 2, 12))
    gpu[0, 0, 1, 5:] = 63.0  # node a: nothing else
    gpu[0, 1, 0, 9:] = 79.0  # node b: a fatal XID, then a non-fatal one on another GPU
    gpu[0, 1, 1, 10:] = 94.0
    times = 1_000_000 + 30 * np.arange(12, dtype=np.int64)
    d = DenseChunk(times, gpu, np.zeros((0, 2, 12)))
    hits = HardEvidence().scan(d, LAY, np.ones((2, 2, 12), dtype=bool), 30)
    assert [(h.t_index, h.node, h.fatal) for h in hits] == [(5, 0, False), (9, 1, True),
                                                            (10, 1, False)]
    tracker = EpisodeTracker(DetectorConfig(), LAY.nodes)
    emit(tracker, [h for h in hits if h.fatal], times, LAY)
    ((node, sig),) = warn(tracker, [h for h in hits if not h.fatal], times, LAY)
    assert node == 0 and sig.gpu == "1"
    assert sig.detail == "XID 63, non-fatal (INFOROM_DRAM_RETIREMENT_EVENT): a warning"
    assert [s.detail[:16] for s in tracker.hard[1].signals] == ["XID 79", "XID 94, non-fata"]
    assert 0 not in tracker.hard  # a warning never opens a hard alert


def test_through_the_detector_xid_63_warns_and_xid_79_is_hard() -> None:
    c = Cluster(seed=5)
    c.xid[2, 3, c.at(10):] = 63
    c.xid[6, 1, c.at(14):] = 79
    alerts = detect(c.telemetry())
    by_node = {a.node: a for a in alerts}
    assert set(by_node) == {"node02", "node06"}
    warn, hard = by_node["node02"], by_node["node06"]
    assert warn.kind is AlertKind.PREDICTIVE and abs(warn.start - c.times[c.at(10)]) <= 240
    assert "XID 63, non-fatal" in warn.signals[0].detail and warn.signals[0].gpu == "3"
    assert hard.kind is AlertKind.HARD


def test_the_kernel_log_path_agrees() -> None:
    """In a kernel log, XID 63 stops no attempt and XID 79 does: the detector now agrees."""
    for xid, stops in ((63, False), (79, True)):
        line = f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, name=python, something\n"
        (ev,) = [e for e in scan_bytes(line.encode(), load_rules(), path="kern.log",
                                       first_line=1, host_hint="a") if e.xid == xid]
        assert is_node_fault(ev) is stops is is_fatal_hardware_xid(xid)
