"""What an import gives back: the faults, the refused records, and the counts.

Nothing is dropped silently: every record read is either part of an imported fault, merged as an
exact duplicate, or refused with its line and a one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.fleet.events import FaultEvent
from trainguard.history.fields import FieldSpec


@dataclass(frozen=True, slots=True)
class Refusal:
    """A record that was not imported: the line it starts on and why (one line)."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True, slots=True)
class ImportedFault:
    """One imported fault; ``line`` is where its record (its start event) is; ``mapped`` says
    whether a mapping rule gave its category (else it is the type's top level as given)."""

    event: FaultEvent
    line: int
    mapped: bool


@dataclass(frozen=True, slots=True)
class ImportCounts:
    """``records`` read; ``faults`` imported; ``duplicates_merged``: faults (an interval
    record, or a start/end pair) that repeat an imported fault exactly (same node, kind, start
    and end) and were merged into it;
    ``overlaps_merged``: imported faults that overlap or touch another fault of the same node
    (of another kind: they become one outage); ``open_faults``: faults with no end yet;
    ``refused``: records refused."""

    records: int
    faults: int
    duplicates_merged: int
    overlaps_merged: int
    open_faults: int
    refused: int


@dataclass(frozen=True, slots=True)
class ImportResult:
    """The faults (sorted by start, then line), the refusals (by line), the counts, the span of
    the imported times (``first_time``: the earliest start; ``last_time``: the latest end, or
    start of a fault still open; None without faults), the layout read, the fields used and
    the unit the duration field was read in (None: no duration field)."""

    faults: tuple[ImportedFault, ...]
    refused: tuple[Refusal, ...]
    counts: ImportCounts
    first_time: float | None
    last_time: float | None
    fmt: str
    fields: FieldSpec
    duration_unit: str | None = None

    @property
    def events(self) -> list[FaultEvent]:
        """The imported faults as the fleet analytics take them."""
        return [fault.event for fault in self.faults]


__all__ = ["ImportCounts", "ImportResult", "ImportedFault", "Refusal"]
