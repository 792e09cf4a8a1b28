"""In-training tracing and its analysis: where each rank stands in its collectives, its time per
step, and from those the rank, host and collective a hang or a straggler comes from.

- `model`: the facts (`CollectiveCall`, `GroupState`, `RankState`, `TraceWindow`);
- `statefile`: each rank's memory-mapped collective state; `flight`: PyTorch flight-recorder
  dumps as the same facts;
- `hang`: `localize_hang` (pure); `collect`: reading states, process states and stacks;
- `straggler`: `detect_stragglers` (pure); `runfiles`: a run directory's trace files.
"""

from __future__ import annotations

from trainguard.trace.flight import FlightDump, read_dump, read_dumps
from trainguard.trace.hang import Culprit, HangDiagnosis, HangKind, RankPlace, localize_hang
from trainguard.trace.model import (
    WORLD,
    CollectiveCall,
    GroupState,
    OpTime,
    RankState,
    TraceWindow,
    window_from_record,
)
from trainguard.trace.statefile import StateWriter, read_state

__all__ = [
    "WORLD",
    "CollectiveCall",
    "Culprit",
    "FlightDump",
    "GroupState",
    "HangDiagnosis",
    "HangKind",
    "OpTime",
    "RankPlace",
    "RankState",
    "StateWriter",
    "TraceWindow",
    "localize_hang",
    "read_dump",
    "read_dumps",
    "read_state",
    "window_from_record",
]
