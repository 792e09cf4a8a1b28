"""The adaptive snapshot interval (pure)."""

from __future__ import annotations

import pytest

from trainguard.snapshot.interval import IntervalConfig, aligned, choose_every, is_due


@pytest.mark.parametrize(
    ("blocking", "steps", "cfg", "k"),
    [
        ([], [], IntervalConfig(), 1),                        # nothing measured: snapshot now
        ([0.1], [], IntervalConfig(), 1),
        ([0.1], [1.0], IntervalConfig(), 5),                  # 0.1 / 5 = 0.02 * 1.0 exactly
        ([0.101], [1.0], IntervalConfig(), 6),
        ([0.01], [1.0], IntervalConfig(), 1),                 # cheap: every step
        ([0.0], [1.0], IntervalConfig(), 1),
        ([2.0], [0.05], IntervalConfig(), 2000),              # 1 GB state, fast steps
        ([2.0], [0.0], IntervalConfig(), 100_000),            # no measurable step: the cap
        ([0.1, 5.0, 0.1], [1.0, 1.0, 1.0], IntervalConfig(), 5),  # a median: one outlier
        ([9.0, 0.1, 0.1], [1.0], IntervalConfig(window=2), 5),    # only the window counts
        ([0.1], [1.0], IntervalConfig(budget=0.1), 1),
        ([0.1], [1.0], IntervalConfig(every=3), 3),           # explicit K overrides
        ([], [], IntervalConfig(every=7), 7),
        ([50.0], [0.01], IntervalConfig(max_every=10), 10),
    ],
)  # fmt: skip
def test_choose_every(blocking: list[float], steps: list[float], cfg: IntervalConfig,
                      k: int) -> None:
    assert choose_every(blocking, steps, cfg) == k


def test_k_is_the_smallest_within_budget() -> None:
    cfg = IntervalConfig(min_interval_s=0.0)  # the blocking budget alone
    for blocking in (0.003, 0.05, 0.37, 1.9):
        for step in (0.01, 0.2, 1.3):
            k = choose_every([blocking], [step], cfg)
            assert blocking / k <= cfg.budget * step * (1 + 1e-9)
            assert k == 1 or blocking / (k - 1) > cfg.budget * step


@pytest.mark.parametrize(("field", "value", "message"), [
    ("every", 0, "snapshot.every must be >= 1"),
    ("budget", 0.0, "snapshot.budget"),
    ("budget", 1.5, "snapshot.budget"),
    ("window", 0, "snapshot.window"),
    ("max_every", 0, "snapshot.max_every"),
])
def test_config_validation(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IntervalConfig(**{field: value})  # type: ignore[arg-type]


def test_is_due_on_multiples_of_k() -> None:
    assert is_due(5, None, 100)  # the first call measures
    assert [s for s in range(1, 30) if is_due(s, 1, 8)] == [8, 16, 24]
    assert not is_due(8, 8, 8)  # never the same step twice
    assert [s for s in range(2, 6) if is_due(s, 1, 1)] == [2, 3, 4, 5]


@pytest.mark.parametrize(("k", "power"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16),
                                          (1000, 1024)])
def test_aligned_rounds_up_to_a_power_of_two(k: int, power: int) -> None:
    assert aligned(k) == power


def test_ranks_with_different_k_share_steps() -> None:
    fast = {s for s in range(1, 200) if is_due(s, 1, aligned(5))}
    slow = {s for s in range(1, 200) if is_due(s, 1, aligned(11))}
    assert slow <= fast and slow


def test_snapshots_are_far_enough_apart_to_replicate() -> None:
    """A snapshot must live long enough in its slot for the buddy's copy: at least
    ``min_interval_s`` plus the copy time at ``replicate_bytes_per_s``."""
    cfg = IntervalConfig(min_interval_s=1.0, replicate_bytes_per_s=1e9)
    assert choose_every([0.0001], [0.1], cfg) == 10
    assert choose_every([0.0001], [0.1], cfg, payload_bytes=2_000_000_000) == 30
    assert choose_every([0.0001], [5.0], cfg) == 1  # slow steps: every step
    big_stall = choose_every([10.0], [0.1], cfg)  # the blocking budget is the larger bound
    assert big_stall == 5000


def test_no_snapshot_measured_yet_still_keeps_them_apart() -> None:
    """A rank restored from a snapshot measures steps before its first snapshot: the minimum
    interval applies (not K = 1, a snapshot every step)."""
    assert choose_every([], [0.1] * 8, IntervalConfig(min_interval_s=0.5)) == 5
    assert choose_every([], [], IntervalConfig()) == 1
