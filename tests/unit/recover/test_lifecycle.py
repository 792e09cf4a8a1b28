"""The supervisor's state machine: every transition in the table, and nothing else."""

from __future__ import annotations

import pytest

from trainguard.recover.lifecycle import FINAL, TRANSITIONS, IllegalTransition, Lifecycle, State


def _path_to(target: State) -> list[State]:
    """Shortest walk from PREPARING to ``target`` through the table."""
    frontier = [[State.PREPARING]]
    while frontier:
        path = frontier.pop(0)
        if path[-1] is target:
            return path
        frontier += [[*path, nxt] for nxt in TRANSITIONS[path[-1]] if nxt not in path]
    raise AssertionError(f"{target} unreachable")


@pytest.mark.parametrize(("src", "dst"),
                         [(s, d) for s, ds in TRANSITIONS.items() for d in sorted(ds)])
def test_every_allowed_transition_is_taken(src: State, dst: State) -> None:
    lc = Lifecycle()
    for state in _path_to(src)[1:]:
        lc.to(state)
    assert lc.to(dst) is dst


@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in State for d in State
                                          if d not in TRANSITIONS[s]])
def test_every_other_transition_is_refused(src: State, dst: State) -> None:
    lc = Lifecycle()
    for state in _path_to(src)[1:]:
        lc.to(state)
    with pytest.raises(IllegalTransition, match="cannot go"):
        lc.to(dst)


def test_final_states_and_a_retry_loop() -> None:
    assert {State.SUCCEEDED, State.FAILED, State.CANCELLED} == FINAL
    lc = Lifecycle()
    for s in (State.LAUNCHING, State.RUNNING, State.STOPPING, State.DECIDING, State.BACKOFF,
              State.LAUNCHING, State.RUNNING, State.STOPPING, State.DECIDING, State.SUCCEEDED):
        lc.to(s)
    assert lc.done and lc.history[-1] is State.SUCCEEDED
