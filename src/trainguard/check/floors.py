"""Operator floors: the absolute limits a host's figures must meet, whatever the other hosts do.

A floor is a minimum for a higher-is-better figure (``gemm_gflops = 20``) and a maximum for a
lower-is-better one (``dcgm_failed = 0``). They load from the ``[floors]`` table of a TOML file:

    [floors]
    write_mbps = 200      # checkpoint dir: at least 200 MB/s with fsync
    gpu_count = 8

    >>> Floors.from_mapping({"write_mbps": 200}).limits["write_mbps"]
    200.0
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.check.probe_base import FIGURES
from trainguard.errors import ConfigError

FLOORABLE = tuple(sorted(name for name, spec in FIGURES.items() if spec.floorable))


def _limit(key: object, value: object, where: str) -> tuple[str, float]:
    if not isinstance(key, str) or key not in FLOORABLE:
        raise ConfigError(f"{where}: unknown figure {key!r}; known: {', '.join(FLOORABLE)}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {key} must be a number, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: {key} must be a finite number >= 0, not {value!r}")
    return key, float(value)


@dataclass(frozen=True, slots=True)
class Floors:
    """Figure name -> its floor (minimum, or maximum where lower is better)."""

    limits: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def from_mapping(mapping: Mapping[Any, Any], where: str = "floors") -> Floors:
        """Floors from a mapping; ConfigError naming ``where`` and the key for a bad entry."""
        return Floors(dict(_limit(k, v, where) for k, v in mapping.items()))

    @staticmethod
    def load(path: Path) -> Floors:
        """The ``[floors]`` table of the TOML file at ``path`` (other tables are ignored)."""
        try:
            with path.open("rb") as fh:
                doc = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read floors file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        table = doc.get("floors")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: no [floors] table")
        return Floors.from_mapping(table, f"{path} [floors]")


__all__ = ["FLOORABLE", "Floors"]
