"""Helpers for the SDK tests (a unique module name: the test tree has no packages)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class FakeClock:
    """Unix time that only moves when told to; also serves as `sleep`."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of an event file; fails on a line that is not one JSON object."""
    return [json.loads(line) for line in path.read_text().splitlines()]
