from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from train_fakes import FakeClock, read_records

from trainguard.train import api


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def records() -> Callable[[Path], list[dict[str, Any]]]:
    return read_records


@pytest.fixture(autouse=True)
def fresh_global_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts without a process-global session and without supervisor variables."""
    for name in list(os.environ):
        if name.startswith("TRAINGUARD_") or name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            monkeypatch.delenv(name)
    api._reset()
    yield
    api._reset()
