from __future__ import annotations

import pytest

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
from trainguard.detect.scorecard import Scorecard, compare, score
from trainguard.detect.truth import AppXid, BenignWindow, Failure, GroundTruth

H = 3600.0
M = 60.0
T0 = 1_700_000_000.0
T_XID = T0 + 2 * 86400.0  # failure on n1
SPAN = (T0, T0 + 7 * 86400.0)


def alert(node: str, start: float, end: float | None = None,
          metrics: tuple[str, ...] = ("DCGM_FI_DEV_GPU_TEMP",)) -> AlertEpisode:
    sig = tuple(Signal(m, "0", 4.0) for m in metrics)
    return AlertEpisode(node, start, start + 600 if end is None else end, 5.0,
                        AlertKind.PREDICTIVE, sig)


def one_failure(**extra: object) -> GroundTruth:
    return GroundTruth(failures=(Failure("n1", T_XID, 79, "0"),), **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(("offset", "detected", "pre_xid", "fp"), [
    (-3 * H - 1, False, False, False),   # one second too early: a long-lead warning, no detection
    (-3 * H, True, True, False),         # exactly 3 h before: detected, pre-XID
    (-1 * H, True, True, False),
    (0.0, True, False, False),           # at the XID: detected but not pre-XID
    (5 * M, True, False, False),         # exactly 5 min after
    (5 * M + 1, False, False, False),    # later: aftermath (no FP, no detection)
    (2 * H, False, False, False),        # exactly 2 h after: still aftermath
    (2 * H + 1, False, False, True),     # past the failure window: FP
])
def test_window_boundaries(offset: float, detected: bool, pre_xid: bool, fp: bool) -> None:
    card = score([alert("n1", T_XID + offset)], one_failure(), SPAN, 64, name="x")
    assert card.total.detected == int(detected)
    assert card.total.pre_xid == int(pre_xid)
    assert card.false_positives == int(fp)
    assert card.long_lead == int(-48 * H <= offset < -3 * H)
    if pre_xid:
        assert card.total.lead is not None
        assert card.total.lead.median == pytest.approx(-offset / 60)


def test_alert_on_other_node_is_fp_and_does_not_detect() -> None:
    card = score([alert("n2", T_XID - H)], one_failure(), SPAN, 64, name="x")
    assert (card.total.detected, card.false_positives) == (0, 1)


def test_alert_started_before_window_and_still_on_does_not_count() -> None:
    long = alert("n1", T_XID - 4 * H, end=T_XID + H)
    card = score([long], one_failure(), SPAN, 64, name="x")
    assert card.total.detected == 0
    assert (card.false_positives, card.long_lead) == (0, 1)  # a long-lead warning


def test_long_lead_warnings_are_counted_apart_and_not_at_an_app_xid() -> None:
    truth = one_failure(app_xids=(AppXid("n1", T_XID - 10 * H, 13),))
    alerts = [alert("n1", T_XID - 30 * H), alert("n1", T_XID - 10 * H), alert("n2", T_XID - 30 * H)]
    card = score(alerts, truth, SPAN, 64, name="x")
    assert card.long_lead == 1  # 30 h ahead on the failing node
    assert card.false_positives == 2  # at the app XID, and on a healthy node
    assert card.to_dict()["long_lead_warnings"] == 1
    late = GroundTruth(failures=(Failure("n1", T0 + 4 * 86400.0, 79, "0"),))
    early = score([alert("n1", T0 + 2 * 86400.0 - 1)], late, SPAN, 64, name="x")
    assert (early.false_positives, early.long_lead) == (1, 0)  # more than 48 h ahead: an FP


@pytest.mark.parametrize(("offset", "fp"), [(-5 * M, True), (5 * M, True), (5 * M + 1, False)])
def test_alert_at_app_xid_is_fp_even_inside_failure_window(offset: float, fp: bool) -> None:
    app_t = T_XID - H
    truth = one_failure(app_xids=(AppXid("n1", app_t, 13),))
    card = score([alert("n1", app_t + offset)], truth, SPAN, 64, name="x")
    assert card.false_positives == int(fp)
    assert card.fp_at_app_xid == int(fp)
    assert card.total.detected == int(not fp)  # an app-XID alert detects nothing


def test_app_xid_on_other_node_does_not_matter() -> None:
    truth = GroundTruth(app_xids=(AppXid("n2", T0 + H, 13),))
    card = score([alert("n1", T0 + H)], truth, SPAN, 64, name="x")
    assert (card.false_positives, card.fp_at_app_xid) == (1, 0)


@pytest.mark.parametrize(("start", "node", "fp"), [
    (T0 + 10 * H, "n3", False),          # window start
    (T0 + 12 * H, "n3", False),          # window end
    (T0 + 12 * H + 1, "n3", True),
    (T0 + 11 * H, "n4", True),           # maintenance on another node excuses nothing
])
def test_maintenance_window(start: float, node: str, fp: bool) -> None:
    truth = GroundTruth(benign=(BenignWindow("n3", T0 + 10 * H, T0 + 12 * H),))
    card = score([alert(node, start)], truth, SPAN, 64, name="x")
    assert card.false_positives == int(fp)


def test_app_xid_inside_maintenance_is_still_fp() -> None:
    truth = GroundTruth(benign=(BenignWindow("n3", T0, T0 + 5 * H),),
                        app_xids=(AppXid("n3", T0 + H, 45),))
    card = score([alert("n3", T0 + H + 60)], truth, SPAN, 64, name="x")
    assert card.false_positives == 1


def test_rates_leads_per_type_and_metrics() -> None:
    truth = GroundTruth(failures=(
        Failure("n1", T_XID, 79, failure_type="fell_off"),
        Failure("n2", T_XID, 48, failure_type="dbe"),
        Failure("n3", T_XID, 48, failure_type="dbe"),
        Failure("n4", T_XID + H, 48, failure_type="dbe"),
    ))
    alerts = [
        alert("n1", T_XID - 30 * M, metrics=("pcie", "temp")),
        alert("n1", T_XID - 10 * M, metrics=("temp",)),
        alert("n2", T_XID - 60 * M, metrics=("ecc",)),
        alert("n3", T_XID + M, metrics=("ecc", "xid")),
        alert("n9", T0 + H), alert("n9", T0 + 2 * H),
        alert("n1", SPAN[1] + H),  # outside the span: ignored
    ]
    card = score(alerts, truth, SPAN, 32, name="det")
    assert (card.total.n, card.total.detected, card.total.pre_xid) == (4, 3, 2)
    assert card.total.lead is not None
    assert (card.total.lead.min, card.total.lead.max, card.total.lead.median) == (30, 60, 45)
    dbe = next(t for t in card.by_type if t.failure_type == "dbe")
    assert (dbe.n, dbe.detected, dbe.pre_xid, dbe.rate) == (3, 2, 1, pytest.approx(2 / 3))
    assert dict(dbe.metrics) == {"ecc": 2, "xid": 1}
    fell = next(t for t in card.by_type if t.failure_type == "fell_off")
    assert dict(fell.metrics) == {"temp": 1, "pcie": 1}  # counted once per failure
    assert card.false_positives == 2
    assert card.n_alerts == 6
    assert card.fp_per_day == pytest.approx(2 / 7)
    assert card.fp_per_day_per_64 == pytest.approx(2 * 64 / 32 / 7)
    d = card.to_dict()
    assert d["total"]["detected"] == 3
    assert d["missed"] == [{"node": "n4", "time": T_XID + H, "failure_type": "dbe"}]


def test_failures_outside_span_are_left_out() -> None:
    truth = GroundTruth(failures=(Failure("n1", SPAN[1] + H, 79),))
    assert score([], truth, SPAN, 64, name="x").total.n == 0


def test_compare_rows_side_by_side() -> None:
    truth = one_failure()
    a = score([alert("n1", T_XID - H)], truth, SPAN, 64, name="a")
    b = score([alert("n2", T_XID - H)], truth, SPAN, 64, name="b")
    table = compare([a, b])
    assert table.header == ("", "a", "b")
    rows = {r[0]: r[1:] for r in table.rows}
    assert rows["detected"] == ("1/1 (100%)", "0/1 (0%)")
    assert rows["false positives"] == ("0", "1")
    assert rows["  xid79"] == ("1/1, 1 pre-XID", "0/1, 0 pre-XID")
    assert all(len(r) == 3 for r in table.rows)
    assert isinstance(a, Scorecard)
