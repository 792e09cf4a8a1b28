"""The supervisor's lifecycle: an enum state machine with an explicit transition table.

    PREPARING -> LAUNCHING -> RUNNING -> STOPPING -> DECIDING -> BACKOFF -> LAUNCHING ...
                                                            \\-> SUCCEEDED | FAILED | CANCELLED
"""

from __future__ import annotations

from enum import StrEnum

from trainguard.errors import TrainguardError


class State(StrEnum):
    PREPARING = "preparing"
    LAUNCHING = "launching"
    RUNNING = "running"
    STOPPING = "stopping"
    DECIDING = "deciding"
    BACKOFF = "backoff"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.PREPARING: frozenset({State.LAUNCHING, State.FAILED, State.CANCELLED}),
    State.LAUNCHING: frozenset({State.RUNNING, State.DECIDING, State.FAILED, State.CANCELLED}),
    State.RUNNING: frozenset({State.STOPPING}),
    State.STOPPING: frozenset({State.DECIDING}),
    State.DECIDING: frozenset({State.BACKOFF, State.SUCCEEDED, State.FAILED, State.CANCELLED}),
    State.BACKOFF: frozenset({State.LAUNCHING, State.CANCELLED}),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
}
FINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)


class IllegalTransition(TrainguardError):
    """A supervisor bug: a state change the table does not allow."""


class Lifecycle:
    """Current state plus the checked ``to`` transition.

        >>> lc = Lifecycle()
        >>> lc.to(State.LAUNCHING).value
        'launching'
    """

    def __init__(self) -> None:
        self.state = State.PREPARING
        self.history: list[State] = [self.state]

    def to(self, new: State) -> State:
        if new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"supervisor cannot go from {self.state} to {new}")
        self.state = new
        self.history.append(new)
        return new

    @property
    def done(self) -> bool:
        return self.state in FINAL


__all__ = ["FINAL", "TRANSITIONS", "IllegalTransition", "Lifecycle", "State"]
