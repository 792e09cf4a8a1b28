"""Which attempt of a run `trainguard diagnose stragglers` reads, and what it concludes.

A relaunched run often ends with a short attempt (it crashed early, or was stopped) whose trace
windows compare nothing, while the attempt before it ran long enough to show a straggler, which
the supervisor may have flagged live (``attempts/<i>/stragglers.json``). As `diagnose hang`
defaults to the latest attempt that hung, the default here is the latest attempt that can tell:
its windows compare two ranks or more, or the supervisor found a straggler in it. When none can,
the answer is "cannot tell", with what each attempt lacked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.trace.straggler import StragglerReport

__all__ = ["AttemptStragglers", "cannot_tell", "describe_supervisor", "pick_attempt"]


@dataclass(frozen=True, slots=True)
class AttemptStragglers:
    """The straggler analysis of one attempt, and the supervisor's live findings in it."""

    attempt: int
    report: StragglerReport
    supervisor: tuple[Mapping[str, Any], ...] = ()
    """Straggler episodes the supervisor recorded while the attempt ran (stragglers.json)."""

    @property
    def telling(self) -> bool:
        """Its windows compare ranks, or the supervisor found a straggler in it."""
        return self.report.conclusive or bool(self.supervisor)

    @property
    def found(self) -> bool:
        """A straggler: found in the windows, or recorded by the supervisor."""
        return bool(self.report.stragglers) or bool(self.supervisor)

    @property
    def lacks(self) -> str:
        """What keeps its windows from telling (one line, naming the attempt)."""
        return f"attempt {self.attempt}: {self.report.note or 'nothing to compare'}"


def pick_attempt(latest_first: Iterable[AttemptStragglers]
                 ) -> tuple[AttemptStragglers | None, tuple[AttemptStragglers, ...]]:
    """The first attempt that can tell (see the module docstring), and those passed over before
    it. `latest_first` may be lazy: it is read no further than the attempt chosen."""
    passed: list[AttemptStragglers] = []
    for read in latest_first:
        if read.telling:
            return read, tuple(passed)
        passed.append(read)
    return None, tuple(passed)


def cannot_tell(passed: Sequence[AttemptStragglers]) -> str:
    """Why no attempt could tell, one line."""
    return "cannot tell whether a rank straggles: " + "; ".join(r.lacks for r in passed)


def describe_supervisor(episode: Mapping[str, Any]) -> str:
    """One line for a straggler episode as the supervisor recorded it."""
    host = episode.get("host") or "unknown host"
    slowdown = episode.get("slowdown")
    how = f"{slowdown:+.0%} work per step vs its peers" \
        if isinstance(slowdown, int | float) else "slower than its peers"
    status = episode.get("status")
    return f"rank {episode.get('rank')} ({host}): {how}" + (f" ({status})" if status else "")
