"""Read a node fault history (JSON array, JSON lines or CSV) into faults, refusing bad records
one by one with their line.

The steps: the records and their lines (:mod:`.sources`); which field means what
(:mod:`.fields`); each record to an event or a fault interval (:mod:`.extract`, times by
:mod:`.times`, kinds by :mod:`.kinds`); events paired into faults (:mod:`.pairing`); exact
duplicates merged and same-kind overlaps refused (:mod:`.overlaps`); each fault's category from
the mapping (:mod:`.mapping`), else the top level of its type.

    >>> text = '''[
    ... {"node_id": "a", "event_time": 1.0, "event_type": "fault_start",
    ...  "fault_type": {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU xid Error"}},
    ... {"node_id": "a", "event_time": 1.5, "event_type": "fault_end",
    ...  "fault_type": {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU xid Error"}}
    ... ]'''
    >>> result = read_history(text, times=TimeSpec(unit="days"))
    >>> fault = result.faults[0]
    >>> fault.line, fault.event.kind, fault.event.category, fault.event.duration_s
    (2, 'Hardware Failure / GPU / GPU xid Error', 'Hardware Failure', 43200.0)
"""

from __future__ import annotations

from dataclasses import replace

from trainguard.errors import HistoryError
from trainguard.fleet.events import FaultEvent
from trainguard.history.extract import Occurrence, Span, read_event, read_interval
from trainguard.history.fields import FieldSpec, resolve_fields
from trainguard.history.kinds import UNKNOWN_KIND, top_level
from trainguard.history.mapping import TypeMapping
from trainguard.history.names import duration_unit_for
from trainguard.history.overlaps import accept_spans, count_overlapping
from trainguard.history.pairing import pair_events
from trainguard.history.result import ImportCounts, ImportedFault, ImportResult, Refusal
from trainguard.history.sources import RecordTable, read_records
from trainguard.history.times import TimeSpec

_DEFAULT_FIELDS = FieldSpec()
_DEFAULT_TIMES = TimeSpec()


def _event_spans(table: RecordTable, spec: FieldSpec, times: TimeSpec,
                 refused: list[Refusal]) -> list[Span]:
    values = (frozenset(v.casefold() for v in spec.start_values),
              frozenset(v.casefold() for v in spec.end_values))
    events: list[Occurrence] = []
    for record in table.records:
        row = read_event(record, spec, times, values)
        if isinstance(row, Refusal):
            refused.append(row)
        else:
            events.append(row)
    spans, bad = pair_events(events, spec.start_values[0] if spec.start_values else "start")
    refused.extend(bad)
    return spans


def _interval_spans(table: RecordTable, spec: FieldSpec, times: TimeSpec,
                    refused: list[Refusal]) -> list[Span]:
    spans: list[Span] = []
    for record in table.records:
        row = read_interval(record, spec, times)
        if isinstance(row, Refusal):
            refused.append(row)
        else:
            spans.append(row)
    return spans


def _imported(spans: list[Span], mapping: TypeMapping | None) -> list[ImportedFault]:
    known: dict[str, tuple[str, bool]] = {}
    out: list[ImportedFault] = []
    for span in spans:
        found = known.get(span.kind)
        if found is None:
            category = mapping.category_for(span.kind) if mapping is not None else None
            found = (category, True) if category is not None else (
                "unknown" if span.kind == UNKNOWN_KIND else top_level(span.kind), False)
            known[span.kind] = found
        event = FaultEvent(span.node, span.start, span.end, span.kind, found[0])
        out.append(ImportedFault(event, span.line, found[1]))
    out.sort(key=lambda f: (f.event.start, f.line))
    return out


def read_history(text: str, *, fmt: str = "auto", fields: FieldSpec = _DEFAULT_FIELDS,
                 times: TimeSpec = _DEFAULT_TIMES, mapping: TypeMapping | None = None,
                 source: str = "<input>") -> ImportResult:
    """The faults of a fault-history ``text``; bad records are refused (with their line), the
    rest imported. A :class:`HistoryError` when the file as a whole cannot be read (not that
    format, no node or time field found, several fields that could be one, a duration field
    whose unit is not said or disagrees with ``times.duration_unit``: it names the option to
    pass)."""
    table = read_records(text, fmt, source)
    if not table.records:
        first = f" ({table.refused[0]})" if table.refused else ""
        raise HistoryError(f"{source}: no records to import{first}")
    spec = resolve_fields(fields, table.keys, source)
    duration_unit: str | None = None
    if spec.duration is not None:
        try:
            duration_unit = duration_unit_for(spec.duration, times.duration_unit)
        except HistoryError as exc:
            raise HistoryError(f"{source}: {exc}") from None
        times = replace(times, duration_unit=duration_unit)
    refused = list(table.refused)
    if spec.mode == "events":
        spans = _event_spans(table, spec, times, refused)
    else:
        spans = _interval_spans(table, spec, times, refused)
    kept, clashes, duplicates = accept_spans(spans)
    refused.extend(clashes)
    refused.sort(key=lambda r: r.line)
    faults = _imported(kept, mapping)
    counts = ImportCounts(records=table.read, faults=len(faults), duplicates_merged=duplicates,
                          overlaps_merged=count_overlapping(kept),
                          open_faults=sum(1 for s in kept if s.end is None),
                          refused=len(refused))
    first_time = min((f.event.start for f in faults), default=None)
    last_time = max((f.event.start if f.event.end is None else f.event.end for f in faults),
                    default=None)
    return ImportResult(tuple(faults), tuple(refused), counts, first_time, last_time, table.fmt,
                        spec, duration_unit)


__all__ = ["read_history"]
