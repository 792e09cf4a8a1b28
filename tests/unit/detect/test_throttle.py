"""Clock-event reasons (detect/throttle.py): which blocks the power governor explains, which
samples are the board's doing, and what the fused score reads of the gauge."""

from __future__ import annotations

import numpy as np

from trainguard.detect.throttle import board_share, cap_blocks, is_reasons


def governed_blocks(gauges: list[np.ndarray], s: int, nb: int) -> np.ndarray:
    """The governed blocks of `cap_blocks` (where the governor alone moved the clock)."""
    return cap_blocks(gauges, s, nb)[1]


def test_power_cap_alone_governs_a_block_and_a_hardware_reason_overrides_it() -> None:
    nan = float("nan")
    x = np.array([[[0, 4, 0, 0,   4, 4 | 8, 0, 0,   nan, nan, 0, 1,   4 | 0x80, 4, 4, 4]]],
                 dtype=float)                                   # 1 node, 1 GPU, 4 blocks of 4
    assert governed_blocks([x], 4, 4).tolist() == [[[True, False, False, False]]]


def test_only_whole_blocks_are_read() -> None:
    x = np.full((2, 3, 10), 4.0)
    assert governed_blocks([x], 4, 2).shape == (2, 3, 2)


def test_a_gauge_renamed_partway_is_read_under_both_names() -> None:
    """An exporter upgrade: the old name holds the first half, the new one the rest; a power
    cap under one name and a hardware reason under the other in the same block: not governed."""
    nan = float("nan")
    old = np.array([[[4, 4, 4, 4,   4, 4, nan, nan,   nan, nan, nan, nan]]])
    new = np.array([[[nan, nan, nan, nan,   nan, nan, 8, 0,   4, 0, 4, 0]]])
    assert governed_blocks([old, new], 4, 3).tolist() == [[[True, False, True]]]
    assert governed_blocks([old], 4, 3).tolist() == [[[True, True, False]]]


def test_both_names_of_the_reasons_gauge_are_known() -> None:
    assert is_reasons('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0"}')
    assert is_reasons("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
    assert not is_reasons("DCGM_FI_DEV_SM_CLOCK")


def test_a_gpu_is_held_at_its_power_limit_when_half_its_samples_report_the_cap() -> None:
    """A GPU drawing about its limit touches it now and then: it is not held there, and its
    power moves as an uncapped GPU's does (the jitter rule's power state)."""
    x = np.array([[[4, 4, 4, 0,   4, 4, 0, 0,   4, 0, 0, 0,   4 | 8, 4 | 8, 0, 0]]], dtype=float)
    held, governed = cap_blocks([x], 4, 4)
    assert held.tolist() == [[[True, True, False, True]]]
    assert governed.tolist() == [[[True, True, True, False]]]


def test_the_score_reads_the_share_of_board_events_not_the_mask() -> None:
    """HW slowdown or the brake counts; heat (a thermal reason, with or without HW slowdown),
    the power cap and idle do not; a block with no sample is missing, not quiet."""
    nan = float("nan")
    x = np.array([[[8, 0x80, 0, 0,   0x40, 8 | 0x40, 0x20, 4,   nan, nan, nan, nan,
                    1, 8, nan, 0]]])
    assert board_share(x, 4).tolist()[0][0][:2] == [0.5, 0.0]
    assert np.isnan(board_share(x, 4)[0, 0, 2])
    assert board_share(x, 4)[0, 0, 3] == 1 / 3
