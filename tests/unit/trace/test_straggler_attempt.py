"""Issue #28: the attempt `diagnose stragglers` reads by default."""

from __future__ import annotations

from collections.abc import Iterator

from trainguard.trace.straggler import StragglerConfig, StragglerReport
from trainguard.trace.straggler_attempt import AttemptStragglers, cannot_tell, pick_attempt

EMPTY = StragglerReport(StragglerConfig(), (), (), note="no trace windows: nothing to compare")


def _read(attempt: int, supervisor: bool = False) -> AttemptStragglers:
    return AttemptStragglers(attempt, EMPTY, ({"rank": 1, "slowdown": 0.4},) if supervisor
                             else ())


def test_the_latest_attempt_that_can_tell_and_no_further() -> None:
    def latest_first() -> Iterator[AttemptStragglers]:
        yield _read(3)
        yield _read(2, supervisor=True)
        raise AssertionError("read past the attempt chosen")

    chosen, passed = pick_attempt(latest_first())
    assert chosen is not None and chosen.attempt == 2 and chosen.found
    assert [p.attempt for p in passed] == [3]


def test_none_that_can_tell_lists_what_each_lacked() -> None:
    chosen, passed = pick_attempt([_read(1), _read(0)])
    assert chosen is None and not any(p.found for p in passed)
    assert cannot_tell(passed) == (
        "cannot tell whether a rank straggles: attempt 1: no trace windows: nothing to "
        "compare; attempt 0: no trace windows: nothing to compare")
