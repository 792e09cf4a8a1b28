"""The process-global session behind ``tg.init()``, ``tg.step()`` and friends."""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import SupportsFloat

from trainguard.train.env import TrainEnv
from trainguard.train.session import OnNonfinite, Session

__all__ = [
    "finish",
    "init",
    "is_supervised",
    "phase",
    "rank",
    "span",
    "step",
    "world_size",
]

_lock = threading.Lock()
_session: Session | None = None


def init() -> Session:
    """Read the supervisor's environment once and start reporting; later calls return the same
    session. Outside ``trainguard run`` nothing is written, but phases, NaN checks, checkpoint
    helpers and ``TRAINGUARD_INJECT`` faults still work.

    Raises `ConfigError` naming the variable when one is malformed.
    """
    global _session
    with _lock:
        if _session is None:
            _session = Session(TrainEnv.from_environ(os.environ))
            atexit.register(_session.close)
        return _session


def _reset() -> None:
    """Forget the global session (tests): the next call re-reads the environment."""
    global _session
    with _lock:
        if _session is not None:
            _session.close()
            atexit.unregister(_session.close)
        _session = None


def is_supervised() -> bool:
    """True when running under ``trainguard run`` (``TRAINGUARD_EVENTS`` is set)."""
    return init().supervised


def rank() -> int:
    """``RANK``, 0 when unset."""
    return init().rank


def world_size() -> int:
    """``WORLD_SIZE``, 1 when unset."""
    return init().world_size


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time a startup phase: ``with tg.phase("dist_init"): dist.init_process_group(...)``."""
    with init().phase(name):
        yield


@contextmanager
def span(name: str) -> Iterator[None]:
    """Time a step phase: ``with tg.span("forward"): loss = model(x)`` (``data``,
    ``forward``, ``backward``, ``optimizer``, ``checkpoint``, or any name)."""
    with init().span(name):
        yield


def step(
    step: int, *, loss: SupportsFloat | None = None, on_nonfinite: OnNonfinite = "raise"
) -> None:
    """Heartbeat for one training step; raises `NonFiniteLossError` on a NaN/inf loss."""
    init().step(step, loss=loss, on_nonfinite=on_nonfinite)


def finish() -> None:
    """Record that training completed."""
    init().finish()
