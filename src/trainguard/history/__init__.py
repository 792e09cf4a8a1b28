"""Fault histories from elsewhere: a cluster's node fault record read into faults (pure: text
in, faults out; no store, no CLI).

- :mod:`.sources`: JSON array, JSON lines or CSV records, each with its 1-based line;
- :mod:`.names`: how field names compare, the names each meaning is found under, units in names;
- :mod:`.fields`: which field means what (given, or found by the usual names);
- :mod:`.times`: absolute (ISO 8601, unix seconds, a strptime format) and relative times;
- :mod:`.kinds`: a fault's kind from its (possibly hierarchical) type;
- :mod:`.mapping`: a TOML mapping file from the source's types onto trainguard's taxonomy;
- :mod:`.extract`: one record to an event or an interval, or its refusal;
- :mod:`.pairing`: start and end events paired per node and kind;
- :mod:`.overlaps`: exact duplicates merged, same-kind overlaps refused, merged outages counted;
- :mod:`.result`: the faults, refusals and counts an import gives back;
- :mod:`.read`: :func:`read_history`, all of the above in order.
"""

from __future__ import annotations

from trainguard.history.fields import (
    DEFAULT_END_VALUES,
    DEFAULT_START_VALUES,
    FieldSpec,
    resolve_fields,
)
from trainguard.history.kinds import UNKNOWN_KIND, kind_of, top_level
from trainguard.history.mapping import TAXONOMY, TypeMapping, load_mapping, parse_mapping
from trainguard.history.names import duration_unit_for, name_unit, normal_name
from trainguard.history.read import read_history
from trainguard.history.result import ImportCounts, ImportedFault, ImportResult, Refusal
from trainguard.history.sources import FORMATS, Record, RecordTable, detect_format, read_records
from trainguard.history.times import (
    EPOCH_UNITS,
    TimeSpec,
    TimeValueError,
    parse_origin,
    parse_zone,
    unit_seconds,
)

__all__ = [
    "DEFAULT_END_VALUES",
    "DEFAULT_START_VALUES",
    "EPOCH_UNITS",
    "FORMATS",
    "TAXONOMY",
    "UNKNOWN_KIND",
    "FieldSpec",
    "ImportCounts",
    "ImportResult",
    "ImportedFault",
    "Record",
    "RecordTable",
    "Refusal",
    "TimeSpec",
    "TimeValueError",
    "TypeMapping",
    "detect_format",
    "duration_unit_for",
    "kind_of",
    "load_mapping",
    "name_unit",
    "normal_name",
    "parse_mapping",
    "parse_origin",
    "parse_zone",
    "read_history",
    "read_records",
    "resolve_fields",
    "top_level",
    "unit_seconds",
]
