"""The detector's fast paths give the same numbers, to the bit, as the plain definitions."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest

from trainguard.detect.baseline import Baseline
from trainguard.detect.numeric import (
    block_means,
    ffill,
    last_valid,
    nanmedian_axis,
    previous_valid,
    previous_valid_and_time,
)
from trainguard.detect.sparse import SparseCounters, step_rows


def _noisy(rng: np.random.Generator, shape: tuple[int, ...], missing: float) -> np.ndarray:
    x = np.round(rng.normal(size=shape) * 10, 1)  # rounded: ties, as in real gauges
    x[rng.random(shape) < missing] = np.nan
    return x


def _ffill_loop(x: np.ndarray, carry: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    last = carry.copy()
    for t in range(x.shape[-1]):
        col = x[..., t]
        last = np.where(np.isnan(col), last, col)
        out[..., t] = last
    return out


@pytest.mark.parametrize("missing", [0.0, 0.05, 0.6, 1.0])
@pytest.mark.parametrize("shape", [(6, 5, 8, 12), (3, 7, 4), (2, 1, 1, 8)])
def test_numeric_helpers_match_their_definitions(shape: tuple[int, ...], missing: float) -> None:
    rng = np.random.default_rng(len(shape) * 10 + int(missing * 10))
    x = _noisy(rng, shape, missing)
    carry = _noisy(rng, shape[:-1], 0.3)
    for axis in range(x.ndim):
        med, k = nanmedian_axis(x, axis)
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning) if (
                np.isnan(x).all(axis=axis).any()) else contextlib.nullcontext():
            want = np.nanmedian(x, axis=axis)
        np.testing.assert_array_equal(med, want)
        np.testing.assert_array_equal(k, (~np.isnan(x)).sum(axis=axis))
    want_fill = _ffill_loop(x, carry)
    np.testing.assert_array_equal(ffill(x, carry), want_fill)
    prev, last = previous_valid(x, carry)
    np.testing.assert_array_equal(prev, np.concatenate([carry[..., None], want_fill[..., :-1]],
                                                       axis=-1))
    np.testing.assert_array_equal(last, want_fill[..., -1])
    blocks = x.reshape(*shape[:-1], -1, 4)
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning) if (
            np.isnan(blocks).all(axis=-1).any()) else contextlib.nullcontext():
        want_means = np.nanmean(blocks, axis=-1)
    np.testing.assert_array_equal(block_means(x, 4), want_means)


def test_previous_valid_does_not_alias_its_input() -> None:
    x = np.arange(12.0).reshape(3, 4)
    _, last = previous_valid(x, np.zeros(3))
    last[:] = -1
    assert x[:, -1].tolist() == [3.0, 7.0, 11.0]


@pytest.mark.parametrize("with_fast", [False, True])
def test_score_update_is_score_then_update(with_fast: bool) -> None:
    rng = np.random.default_rng(7)
    shape = (5, 9, 4)
    base = Baseline.empty(shape)
    busy = rng.random(9) < 0.6
    floor = np.full(1, 0.5)
    plain = copy.deepcopy(base)
    for block in range(12):
        r = _noisy(rng, shape, 0.1)
        fast = np.broadcast_to((rng.random(9) < 0.3)[None, :, None], shape) if with_fast \
            else None
        busy = busy ^ (rng.random(9) < 0.2)
        z_plain = plain.score(r, busy[None, :, None], floor, 3.0)
        plain.update(r, np.broadcast_to(busy[None, :, None], shape), floor, 0.05, 3.0, fast)
        z = base.score_update(r, busy[None, :, None], floor, 3.0, 0.05, 3.0, fast)
        np.testing.assert_array_equal(z, z_plain, err_msg=f"block {block}")
        for name in ("mu", "spread", "n"):
            np.testing.assert_array_equal(getattr(base, name), getattr(plain, name))
    assert np.isfinite(z).any()


@pytest.mark.parametrize("state", ["busy", "idle", "mixed"])
def test_score_update_of_one_slot_is_score_then_update(state: str) -> None:
    """All nodes busy (or all idle) reads and writes that slot in place: the same numbers."""
    rng = np.random.default_rng(5)
    shape = (4, 6, 3)
    base = Baseline.empty(shape)
    floor = np.full(1, 0.5)
    for block in range(10):
        busy = np.full(6, state == "busy") if state != "mixed" or block < 5 \
            else rng.random(6) < 0.5
        r = _noisy(rng, shape, 0.1)
        plain = copy.deepcopy(base)
        z_plain = plain.score(r, busy[None, :, None], floor, 3.0)
        plain.update(r, np.broadcast_to(busy[None, :, None], shape), floor, 0.05, 3.0)
        z = base.score_update(r, busy[None, :, None], floor, 3.0, 0.05, 3.0)
        np.testing.assert_array_equal(z, z_plain, err_msg=f"block {block}")
        for name in ("mu", "spread", "n"):
            np.testing.assert_array_equal(getattr(base, name), getattr(plain, name))
    assert np.isfinite(z).any()

def _plain_block_means(x: np.ndarray, s: int) -> np.ndarray:
    """Block means by the plain definition: per block of `s` samples, the sum of the values
    present (in sample order) over their count; NaN where none is."""
    nb = x.shape[-1] // s
    want = np.empty((*x.shape[:-1], nb))
    for b in range(nb):
        cols = x[..., s * b: s * b + s]
        ok = ~np.isnan(cols)
        total = np.zeros(x.shape[:-1])
        for j in range(s):
            total = np.where(ok[..., j], total + cols[..., j], total)
        with np.errstate(invalid="ignore"):
            want[..., b] = np.where(ok.any(axis=-1), total / np.maximum(ok.sum(axis=-1), 1),
                                    np.nan)
    return want


@pytest.mark.parametrize("missing", [0.0, 1e-4])
def test_block_means_without_missing_values_take_the_fast_path_to_the_same_bits(
        missing: float) -> None:
    rng = np.random.default_rng(9)
    x = rng.normal(size=(5, 7, 3, 16)) * 10.0 ** rng.integers(-3, 12, size=(5, 7, 3, 1))
    x[rng.random(x.shape) < missing] = np.nan
    x[0, 0, 0, :4] = [-0.0, -0.0, -0.0, -0.0]
    want = _plain_block_means(x, 4)
    got = block_means(x, 4)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_step_rows_is_a_step_with_no_data_elsewhere() -> None:
    rng = np.random.default_rng(3)
    shape = (6, 4, 8)
    rows = np.array([1, 4])
    part, whole = SparseCounters(), SparseCounters()
    part.grow(shape)
    whole.grow(shape)
    for _ in range(15):
        k = np.full(shape, np.nan)
        k[rows] = rng.poisson(0.3, size=(2, *shape[1:])).astype(float)
        z_whole, sparse_whole = whole.step(k, 0.05, 3.0)
        z, sparse = step_rows(part, rows, k[rows], 0.05, 3.0)
        np.testing.assert_array_equal(z, z_whole[rows])
        np.testing.assert_array_equal(sparse, sparse_whole[rows])
        assert not sparse_whole[np.setdiff1d(np.arange(6), rows)].any()
    for name in ("mask", "normal", "n"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name))


@pytest.mark.parametrize("missing", [0.0, 0.1, 0.97])
def test_calibrate_takes_the_sorted_quantile(missing: float) -> None:
    from trainguard.detect.signals.fusion import calibrate as _calibrate

    rng = np.random.default_rng(11)
    a = np.abs(_noisy(rng, (40, 300), missing))
    a[:5, :290] = np.nan  # rows with too few values are left alone
    cal = np.where(rng.random(40) < 0.5, 0.0, 2.0)
    s = np.sort(a, axis=1)
    k = np.sum(~np.isnan(a), axis=1)
    pos = np.clip(np.floor(0.99 * (k - 1)).astype(np.intp), 0, a.shape[1] - 1)
    q = np.take_along_axis(s, pos[:, None], axis=1)[:, 0]
    ok = (k >= 20) & np.isfinite(q)
    want = np.where(ok, np.where(cal == 0, q, 0.99 * cal + 0.01 * q), cal)
    np.testing.assert_array_equal(_calibrate(cal, a, 0.99), want)


@pytest.mark.parametrize("missing", [0.0, 0.05, 0.6, 1.0])
def test_previous_valid_and_time_is_previous_valid_of_values_and_of_their_times(
        missing: float) -> None:
    """One search for the gaps serves the values and their times: the same numbers as two."""
    rng = np.random.default_rng(int(missing * 100) + 1)
    x = _noisy(rng, (4, 6, 3, 12), missing)
    carry = _noisy(rng, x.shape[:-1], 0.3)
    times = 1_700_000_000.0 + 30.0 * np.arange(12)
    tcarry = np.where(np.isnan(carry), np.nan, times[0] - 30.0 * rng.integers(1, 9, carry.shape))
    prev, last, prev_t, last_t = previous_valid_and_time(x, carry, times, tcarry)
    want_prev, want_last = previous_valid(x, carry)
    timed = np.where(np.isnan(x), np.nan, np.broadcast_to(times, x.shape))
    want_prev_t, want_last_t = previous_valid(timed, tcarry)
    for got, want in ((prev, want_prev), (last, want_last), (prev_t, want_prev_t),
                      (last_t, want_last_t)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("missing", [0.0, 0.3, 1.0])
def test_last_valid_is_the_last_column_of_the_forward_fill(missing: float) -> None:
    rng = np.random.default_rng(int(missing * 10) + 20)
    x = _noisy(rng, (5, 9, 7), missing)
    carry = _noisy(rng, (5, 9), 0.5)
    np.testing.assert_array_equal(last_valid(x, carry), ffill(x, carry)[..., -1])


def test_block_means_of_a_time_slice_summed_a_few_rows_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk's slice of time (not contiguous), summed in many row groups: the same bits."""
    import trainguard.detect.numeric as numeric

    rng = np.random.default_rng(4)
    whole = _noisy(rng, (7, 5, 3, 24), 0.02)
    whole[0, 0, 0, 4:8] = np.nan  # one block with no sample at all
    x = whole[..., 4:20]
    want = _plain_block_means(x, 4)
    monkeypatch.setattr(numeric, "_BLOCK_ROWS_BYTES", 3 * 8 * x.shape[-1])  # 3 rows a group
    np.testing.assert_array_equal(block_means(x, 4), want)
    assert np.isnan(want).any() and np.isnan(x[..., 8:]).any()  # partly missing blocks too
