"""Records of a fault-history file, each with the 1-based line it starts on.

Three layouts are read (``fmt``):

- ``json``: one JSON array of objects; an object's line is the line of its opening ``{``;
- ``jsonl``: one JSON object per line (blank lines skipped);
- ``csv``: a header row, then one record per row (comma, tab, semicolon or ``|``, whichever the
  header uses most); a quoted value may span lines, and the record's line is where it starts.

``auto`` picks ``json`` when the text starts with ``[``, ``jsonl`` when it starts with ``{`` and
``csv`` when the first line has a delimiter. A record that is not an object (JSON) or has the
wrong number of values (CSV) is a :class:`~trainguard.history.result.Refusal`, not an error;
text that is not that format at all is a :class:`~trainguard.errors.HistoryError`.

    >>> table = read_records('[{"a": 1},\\n {"a": 2}]', "auto", "x.json")
    >>> table.fmt, [(r.line, r.values) for r in table.records]
    ('json', [(1, {'a': 1}), (2, {'a': 2})])
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from trainguard.errors import HistoryError
from trainguard.history.result import Refusal

FORMATS = ("auto", "json", "jsonl", "csv")
"""What ``fmt`` may be."""

_DELIMITERS = (",", "\t", ";", "|")
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Record:
    """One record: its values by field name (CSV values are stripped strings, "" = missing)."""

    line: int
    values: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class RecordTable:
    """What a file holds: its layout, every field name seen (first-seen order), the records,
    and the records refused for their shape; ``read`` counts both."""

    fmt: str
    keys: tuple[str, ...]
    records: tuple[Record, ...]
    refused: tuple[Refusal, ...]

    @property
    def read(self) -> int:
        return len(self.records) + len(self.refused)


def detect_format(text: str, source: str) -> str:
    """``json``, ``jsonl`` or ``csv`` from how ``text`` starts (see the module docstring)."""
    head = text.lstrip()
    if not head:
        raise HistoryError(f"{source} is empty: no records to import")
    if head[0] == "[":
        return "json"
    if head[0] == "{":
        return "jsonl"
    first = head.split("\n", 1)[0]
    if any(d in first for d in _DELIMITERS):
        return "csv"
    raise HistoryError(f"{source}: cannot tell its format (not a JSON array, JSON lines or CSV "
                       f"with a header); pass --format json, jsonl or csv")


def read_records(text: str, fmt: str, source: str) -> RecordTable:
    """The records of ``text`` in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise HistoryError(f"unknown format {fmt!r} for {source}: use "
                           + ", ".join(FORMATS[:-1]) + f" or {FORMATS[-1]}")
    text = text.removeprefix("\ufeff")
    if fmt == "auto":
        fmt = detect_format(text, source)
    if not text.strip():
        raise HistoryError(f"{source} is empty: no records to import")
    if fmt == "json":
        return _json_array(text, source)
    if fmt == "jsonl":
        return _json_lines(text, source)
    return _csv(text, source)


def _keys(records: list[Record]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for record in records:
        for key in record.values:
            seen.setdefault(key, None)
    return tuple(seen)


def _not_object(line: int, value: object) -> Refusal:
    return Refusal(line, f"record is a JSON {type(value).__name__}, not an object")


def _skip(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not white space."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _json_array(text: str, source: str) -> RecordTable:
    pos = _skip(text, 0)
    if text[pos] != "[":
        hint = " (for one object per line pass --format jsonl)" if text[pos] == "{" else ""
        raise HistoryError(f"{source} is not a JSON array{hint}")
    records: list[Record] = []
    refused: list[Refusal] = []
    line, counted = 1, 0
    pos = _skip(text, pos + 1)
    if pos < len(text) and text[pos] == "]":
        return RecordTable("json", (), (), ())
    while True:
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise HistoryError(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}") from exc
        if isinstance(value, dict):
            records.append(Record(line, value))
        else:
            refused.append(_not_object(line, value))
        pos = _skip(text, pos)
        sep = text[pos] if pos < len(text) else ""
        if sep == "]":
            break
        if sep != ",":
            line += text.count("\n", counted, pos)
            raise HistoryError(f"{source} is not valid JSON: expected ',' or ']' at line {line}")
        pos = _skip(text, pos + 1)
    rest = text[pos + 1:]
    if rest.strip():
        line += text.count("\n", counted, pos)
        raise HistoryError(f"{source} is not valid JSON: extra data after the array "
                           f"(it ends at line {line})")
    return RecordTable("json", _keys(records), tuple(records), tuple(refused))


def _json_lines(text: str, source: str) -> RecordTable:
    records: list[Record] = []
    refused: list[Refusal] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            refused.append(Refusal(number, f"not a JSON object: {exc.msg} at column {exc.colno}"))
            continue
        if isinstance(value, dict):
            records.append(Record(number, value))
        else:
            refused.append(_not_object(number, value))
    if not records:
        raise HistoryError(f"{source} is not JSON lines: no line holds a JSON object "
                           f"(first problem: line {refused[0].line}: {refused[0].reason})")
    return RecordTable("jsonl", _keys(records), tuple(records), tuple(refused))


def _delimiter(header: str) -> str:
    return max(_DELIMITERS, key=header.count)


def _csv(text: str, source: str) -> RecordTable:
    first = text.lstrip("\r\n").split("\n", 1)[0]
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(first))
    header: list[str] | None = None
    header_line = 0
    records: list[Record] = []
    refused: list[Refusal] = []
    done = 0  # physical lines consumed before the current row
    try:
        for row in reader:
            line, done = done + 1, reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue
            if header is None:
                header, header_line = [cell.strip() for cell in row], line
                continue
            if len(row) != len(header):
                refused.append(Refusal(line, f"has {len(row)} values, the header (line "
                                             f"{header_line}) names {len(header)} fields"))
                continue
            records.append(Record(line, {k: v.strip() for k, v in zip(header, row, strict=True)}))
    except csv.Error as exc:
        raise HistoryError(f"{source} is not valid CSV at line {reader.line_num}: {exc}") from exc
    if header is None:
        raise HistoryError(f"{source} is empty: no records to import")
    empty = [name for name in header if not name]
    if empty or len(set(header)) != len(header):
        raise HistoryError(f"{source}: the CSV header (line {header_line}) has "
                           + ("an empty field name" if empty else "a repeated field name"))
    return RecordTable("csv", tuple(header), tuple(records), tuple(refused))


__all__ = ["FORMATS", "Record", "RecordTable", "detect_format", "read_records"]
