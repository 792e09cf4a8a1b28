"""The second look before a workload-shaped precursor warns (detect/confirm.py)."""

from __future__ import annotations

import json

import pytest

from trainguard.detect.alerts import Signal
from trainguard.detect.config import ConfigError, DetectorConfig
from trainguard.detect.confirm import PrecursorConfirm
from trainguard.watch.statecodec import decode, encode

POWER = "DCGM_FI_DEV_POWER_USAGE"
CLOCK = "DCGM_FI_DEV_SM_CLOCK"
SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
XID = "DCGM_FI_DEV_XID_ERRORS"


def _sig(metric: str, gpu: str | None = "3") -> Signal:
    return Signal(metric, gpu, 4.0, "finding")


def _confirm(window_blocks: float = 180.0) -> PrecursorConfirm:
    return PrecursorConfirm(DetectorConfig(block_s=120.0,
                                           precursor_confirm_s=window_blocks * 120.0))


def test_a_lone_watched_hit_stays_a_watch() -> None:
    c = _confirm()
    assert c.merge({}, {4: [(1, _sig(POWER))]}, clock=0.0, nb=10) == {}


def test_a_second_hit_on_the_same_gpu_within_the_window_warns() -> None:
    c = _confirm()
    c.merge({}, {0: [(1, _sig(POWER))]}, clock=0.0, nb=10)
    out = c.merge({}, {5: [(1, _sig(POWER))]}, clock=100.0, nb=10)
    assert list(out) == [5]
    (ni, sig), = out[5]
    assert ni == 1 and sig.detail == ("finding; confirmed: another precursor on this GPU 3.5 h "
                                      "earlier")


def test_a_second_hit_after_the_window_or_on_another_gpu_does_not() -> None:
    c = _confirm()
    c.merge({}, {0: [(1, _sig(POWER))]}, clock=0.0, nb=1)
    assert c.merge({}, {0: [(1, _sig(POWER, "4")), (2, _sig(POWER))]}, clock=10.0, nb=1) == {}
    assert c.merge({}, {0: [(1, _sig(POWER))]}, clock=400.0, nb=1) == {}


def test_two_series_of_a_gpu_in_one_block_confirm_each_other() -> None:
    out = _confirm().merge({}, {2: [(1, _sig(POWER)), (1, _sig(CLOCK))]}, clock=0.0, nb=3)
    assert [s.detail for _, s in out[2]] == [
        f"finding; confirmed: {CLOCK} of this GPU in the same block",
        f"finding; confirmed: {POWER} of this GPU in the same block"]


def test_a_physical_precursor_warns_at_once_and_confirms_a_later_watch() -> None:
    c = _confirm()
    first = c.merge({3: [(1, _sig(SBE))]}, {}, clock=0.0, nb=5)
    assert first == {3: [(1, _sig(SBE))]}  # recurring error counts need no second look
    out = c.merge({}, {0: [(1, _sig(POWER))]}, clock=33.0, nb=1)
    assert "another precursor on this GPU 1.0 h earlier" in out[0][0][1].detail


def test_off_every_hit_warns_unchanged() -> None:
    out = _confirm(0.0).merge({1: [(0, _sig(SBE))]}, {1: [(1, _sig(POWER))], 2: [(2, _sig(CLOCK))]},
                              clock=0.0, nb=3)
    assert out == {1: [(0, _sig(SBE)), (1, _sig(POWER))], 2: [(2, _sig(CLOCK))]}


def test_old_hits_are_forgotten() -> None:
    c = _confirm(10.0)
    c.merge({}, {0: [(1, _sig(POWER))]}, clock=0.0, nb=1)
    c.merge({}, {}, clock=50.0, nb=1)
    assert c.seen == {}


def test_the_state_survives_the_state_codec() -> None:
    c = _confirm()
    c.merge({}, {0: [(1, _sig(POWER)), (2, _sig(CLOCK, None))]}, clock=7.0, nb=1)
    back = decode(json.loads(json.dumps(encode(c))))
    assert isinstance(back, PrecursorConfirm) and back.seen == c.seen == {(1, "3"): 7.0,
                                                                          (2, None): 7.0}


def test_a_remap_with_wear_before_it_warns_at_once() -> None:
    c = _confirm()
    c.merge({}, {}, clock=0.0, nb=10, errors={2: {(1, "3")}})
    out = c.merge({}, {}, clock=40.0, nb=1, repairs={0: [(1, _sig(XID))]})
    assert out[0][0][1].detail == "finding; confirmed: more memory wear on this GPU 1.3 h earlier"
    assert c.waiting == []


def test_wear_beside_a_remap_confirms_nothing_and_wear_far_enough_after_it_does() -> None:
    c = _confirm()
    # the error that made the GPU remap the row: the block before, the same, the one after
    out = c.merge({}, {}, clock=0.0, nb=12, repairs={5: [(1, _sig(XID))]},
                  errors={4: {(1, "3")}, 5: {(1, "3")}, 6: {(1, "3")}})
    assert out == {} and [(t, ni) for t, ni, _ in c.waiting] == [(5.0, 1)]
    out = c.merge({}, {}, clock=12.0, nb=10, errors={3: {(1, "3")}})
    assert list(out) == [3]     # it warns in the block of its confirmation
    assert out[3][0][1].detail.endswith("more memory wear on this GPU 0.3 h later")
    assert c.waiting == []


def test_wear_on_another_gpu_or_after_the_window_confirms_no_remap() -> None:
    c = _confirm(window_blocks=30.0)
    c.merge({}, {}, clock=0.0, nb=1, repairs={0: [(1, _sig(XID))]})
    assert c.merge({}, {}, clock=1.0, nb=20, errors={9: {(1, "4")}, 10: {(2, "3")}}) == {}
    assert c.merge({}, {}, clock=21.0, nb=20, errors={19: {(1, "3")}}) == {}   # 39 blocks on
    assert c.waiting == [] and c.seen == {}


def test_a_later_precursor_hit_on_its_gpu_confirms_a_waiting_remap() -> None:
    c = _confirm()
    c.merge({}, {}, clock=0.0, nb=1, repairs={0: [(1, _sig(XID))]})
    out = c.merge({2: [(1, _sig(SBE))]}, {}, clock=30.0, nb=3)
    assert [s.metric for _, s in out[2]] == [SBE, XID]
    assert out[2][1][1].detail.endswith("another precursor on this GPU 1.1 h later")


def test_off_a_remap_warns_at_once() -> None:
    out = _confirm(0.0).merge({}, {}, clock=0.0, nb=2, repairs={1: [(0, _sig(XID))]})
    assert out == {1: [(0, _sig(XID))]}


def test_waiting_remaps_and_wear_survive_the_state_codec() -> None:
    c = _confirm()
    c.merge({}, {}, clock=0.0, nb=3, repairs={0: [(2, _sig(XID, "5"))]}, errors={2: {(1, "3")}})
    back = decode(json.loads(json.dumps(encode(c))))
    assert back.waiting == c.waiting == [(0.0, 2, _sig(XID, "5"))]
    assert back.errors == c.errors == {(1, "3"): (2.0, 2.0)}


@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_negative_window_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match="precursor_confirm_s"):
        DetectorConfig(precursor_confirm_s=value)
