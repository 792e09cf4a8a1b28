"""Streaming reader for OpenMetrics 1.0 / Prometheus text exposition files with timestamps.

Backfill dumps (`promtool tsdb dump-openmetrics`, exporter scrapes saved with timestamps) are
large: the reader streams plain or gzip files in 4 MiB chunks, so memory is bounded by the
samples kept (16 bytes each), and parses about 1 M lines/s on one core:

1. each chunk is split into lines; a sample line is split from the right into
   `series-text value timestamp`;
2. the series text is looked up in a cache filled by the full parser the first time that exact
   text was seen, mapping it to the `append` methods of two `array('d')` (values, timestamps);
3. value and timestamp texts go through a bounded dict of already-parsed numbers (timestamps
   repeat across series, exporter values are mostly small integers), else `float()`;
4. anything else (comments, exemplars, escapes the cache has not seen, malformed lines) goes
   through the full parser, which counts malformed lines with file:line and a reason.

At the end every series' arrays go to the builder in one `add_series` call. Input is bounded
(`limits.py`, `lines.py`): runs of empty lines cost almost nothing, lines over 64 KiB and label
values over 4096 characters are malformed, and a gzip file may expand at most 250x.

    >>> stats = read_openmetrics([Path("dump.om.gz")], builder)  # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import io
import logging
import re
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry.builder import TelemetryBuilder
from trainguard.telemetry.frame import MetricKind
from trainguard.telemetry.limits import (
    GZIP_RATIO_FLOOR_BYTES,
    MAX_GZIP_RATIO,
    MAX_LABEL_VALUE_CHARS,
    MAX_LINE_BYTES,
)
from trainguard.telemetry.lines import LineBatch, iter_line_batches
from trainguard.telemetry.snapshot import (
    MissingTimestamps,
    StampFor,
    missing_timestamps_message,
)

__all__ = ["OPENMETRICS_SUFFIXES", "ParseStats", "expand_paths", "parse_series_text",
           "read_openmetrics", "require_timestamps"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
TimestampUnit = Literal["auto", "s", "ms"]

OPENMETRICS_SUFFIXES = (".om", ".txt", ".prom", ".openmetrics")
"""File suffixes read from a directory, each also with `.gz` appended."""

_CHUNK = 4 << 20
_MAX_EXAMPLES = 10
_MAX_NUMBERS = 200_000
"""Bound on the cache of parsed number texts (values and timestamps), cleared when exceeded."""
_MS_THRESHOLD = 1e11
"""In "auto" mode a timestamp above this is in milliseconds (1e11 s is the year 5138)."""

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(
    r'\s*(?:([a-zA-Z_][a-zA-Z0-9_]*)|"((?:[^"\\]|\\.)*)")\s*(=\s*"((?:[^"\\]|\\.)*)")?\s*(,|\})',
    re.DOTALL)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_CREATED_FAMILIES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


@dataclass(frozen=True, slots=True)
class ParseStats:
    """What the reader saw: `examples` are the first malformed lines as `file:line: reason`."""

    files: int
    bytes: int
    lines: int
    samples: int
    series: int
    malformed: int
    examples: tuple[str, ...]
    skipped_created: int = 0
    untimestamped: int = 0
    """Samples without a timestamp and no `stamp` for their file: skipped (see snapshot.py)."""
    untimestamped_files: tuple[str, ...] = ()
    """The first files holding such samples."""
    n_untimestamped_files: int = 0
    stamped: int = 0
    """Samples without a timestamp that were given their file's `stamp` time."""

    @property
    def warnings(self) -> list[str]:
        """One-line summaries for the user (empty when every line parsed)."""
        out: list[str] = []
        if self.untimestamped:
            out.append(
                f"{self.untimestamped} samples without a timestamp skipped in "
                f"{self.n_untimestamped_files} files (e.g. {self.untimestamped_files[0]}); "
                "stamp them with --at TIME or --at mtime")
        if not self.malformed:
            return out
        head = f"{self.malformed} malformed OpenMetrics lines skipped"
        return [*out, head + (f"; first: {self.examples[0]}" if self.examples else ""),
                *self.examples[1:]]


@dataclass(slots=True)
class _Series:
    name: str
    kind: MetricKind
    labels: dict[str, str]
    values: array[float] = field(default_factory=lambda: array("d"))
    ts: array[float] = field(default_factory=lambda: array("d"))


class _Malformed(Exception):
    """Internal: one line's reason for being skipped."""


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: {"n": "\n", "\\": "\\", '"': '"'}.get(m[1], m[0]), value)


def _parse_float(token: str, what: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise _Malformed(f"invalid {what} {token[:40]!r}") from None


def _family_kind(name: str, types: dict[str, str]) -> tuple[MetricKind, bool]:
    """The kind of a sample name from the file's `# TYPE` lines, and whether to skip it."""
    declared = types.get(name)
    suffix = ""
    if declared is None:
        for suffix in ("_total", "_bucket", "_count", "_sum", "_created", "_gcount", "_gsum",
                       "_info"):
            if name.endswith(suffix):
                declared = types.get(name[: -len(suffix)])
                if declared is not None:
                    break
        else:
            suffix = ""
    if suffix == "_created" and declared in _CREATED_FAMILIES:
        return MetricKind.UNKNOWN, True
    if declared == "counter":
        return MetricKind.COUNTER, False
    if declared in ("histogram", "summary"):
        return (MetricKind.COUNTER if suffix else MetricKind.GAUGE), False
    if declared in ("gauge", "gaugehistogram", "info", "stateset"):
        return MetricKind.GAUGE, False
    return MetricKind.UNKNOWN, False


class _Parser:
    def __init__(self, timestamp_unit: TimestampUnit) -> None:
        self.unit = timestamp_unit
        self.series: list[_Series] = []
        self.by_identity: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = {}
        self.cache: dict[bytes, tuple[Callable[[float], None], Callable[[float], None]]] = {}
        self.types: dict[str, str] = {}
        self.numbers: dict[bytes, float] = {}
        self.sink: array[float] = array("d")
        self.skip_sink = (self.sink.append, self.sink.append)
        self.lines = self.samples = self.malformed = self.skipped_created = self.n_slow = 0
        self.examples: list[str] = []
        self.stamp: float | None = None
        """The current file's time for samples without one (None: they are skipped)."""
        self.untimestamped = self.stamped = 0
        self.untimestamped_files: dict[str, None] = {}

    # -- hot loop ---------------------------------------------------------------------------
    def feed(self, batch: LineBatch, where: str) -> None:
        for lineno in batch.too_long:
            self.malformed += 1
            self._example(f"{where}:{lineno}: line longer than {MAX_LINE_BYTES} bytes")
        self.lines += len(batch.too_long) + batch.n_lines - len(batch.lines)
        lines = batch.lines
        get = self.cache.get
        numbers = self.numbers
        number = numbers.get
        slow = self.slow
        last_miss = -1
        n_slow = self.n_slow
        stamping = self.stamp is not None
        stamp = self._stamp_value()
        stamped = 0
        for line in lines:
            head, _, t = line.rpartition(b" ")
            prefix, _, v = head.rpartition(b" ")
            try:
                append_value, append_ts = get(prefix)  # type: ignore[misc]  # None: TypeError
                # Timestamps repeat across series and most exporter values are small integers:
                # a dict hit is ~3x cheaper than float().
                fv = number(v)
                if fv is None:
                    fv = numbers[v] = float(v)
                ft = number(t)
                if ft is None:
                    ft = numbers[t] = float(t)
            except (TypeError, ValueError):
                # A saved scrape stamped by --at: `series value`, no timestamp.
                appenders = get(head) if stamping else None
                if appenders is not None:
                    fv = number(t)
                    if fv is None:
                        try:
                            fv = numbers[t] = float(t)
                        except ValueError:
                            fv = None
                    if fv is not None:
                        appenders[0](fv)
                        appenders[1](stamp)
                        stamped += 1
                        continue
                # A line equal to this one since the last miss would have missed too, so the
                # first equal line after the last miss is this one: its number costs nothing
                # on the hot path.
                last_miss = lines.index(line, last_miss + 1)
                slow(line, prefix, where, batch.lineno(last_miss))
                continue
            append_value(fv)
            append_ts(ft)
        self.samples += len(lines) - (self.n_slow - n_slow) - len(self.sink) // 2
        self.stamped += stamped
        self.lines += len(lines)
        del self.sink[:]
        if len(numbers) > _MAX_NUMBERS:
            numbers.clear()

    def _stamp_value(self) -> float:
        """The current file's `--at` time in the file's timestamp unit (0 when not stamping)."""
        if self.stamp is None:
            return 0.0
        return self.stamp * 1000.0 if self.unit == "ms" else self.stamp

    # -- full parser ------------------------------------------------------------------------
    def slow(self, line: bytes, fast_prefix: bytes, where: str, lineno: int) -> None:
        self.n_slow += 1
        try:
            if len(line) > MAX_LINE_BYTES:  # the label regex would need memory per character
                raise _Malformed(f"line longer than {MAX_LINE_BYTES} bytes")
            self._parse(line, fast_prefix, where)
        except _Malformed as exc:
            self.malformed += 1
            self._example(f"{where}:{lineno}: {exc}")

    def _example(self, text: str) -> None:
        if len(self.examples) < _MAX_EXAMPLES:
            self.examples.append(text)

    def _parse(self, raw: bytes, fast_prefix: bytes, where: str) -> None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed("not valid UTF-8") from None
        text = text.rstrip("\r")
        if not text.strip():
            return
        if text.startswith("#"):
            self._comment(text)
            return
        name, labels, pos = self._series_text(text)
        rest, _, _exemplar = text[pos:].partition(" # ")
        if rest and not rest[0].isspace():
            raise _Malformed("expected a space after the series name and labels")
        tokens = rest.split()
        if not tokens:
            raise _Malformed("sample has no value")
        if len(tokens) > 2:
            raise _Malformed(f"unexpected text after the timestamp: {tokens[2][:40]!r}")
        value = _parse_float(tokens[0], "value")
        if len(tokens) == 1:
            if self.stamp is None:
                self.untimestamped += 1
                self.untimestamped_files.setdefault(where, None)
                return
            ts = self._stamp_value()
            # The hot loop looks a stamped line up by the text before its last space.
            head = raw.rpartition(b" ")[0]
            fast_prefix = head if head == text[:pos].encode() else b""
        else:
            ts = _parse_float(tokens[1], "timestamp")
        key = (name, tuple(sorted(labels.items())))
        series = self.by_identity.get(key)
        if series is None:
            kind, skip = _family_kind(name, self.types)
            if skip:
                self.skipped_created += 1
                if fast_prefix == text[:pos].encode():
                    self.cache[fast_prefix] = self.skip_sink
                return
            series = self.by_identity[key] = _Series(name, kind, labels)
            self.series.append(series)
        series.values.append(value)
        series.ts.append(ts)
        self.samples += 1
        self.stamped += len(tokens) == 1
        if fast_prefix and fast_prefix == text[:pos].encode():
            self.cache[fast_prefix] = (series.values.append, series.ts.append)

    def _comment(self, text: str) -> None:
        parts = text.split(None, 3)
        if len(parts) >= 4 and parts[1] == "TYPE":
            self.types[parts[2]] = parts[3].strip().lower()
        elif len(parts) == 3 and parts[1] == "TYPE":
            raise _Malformed("# TYPE line without a type")

    @staticmethod
    def _series_text(text: str) -> tuple[str, dict[str, str], int]:
        """Parse `name{labels}` (or `{"name", labels}`); return name, labels, end offset."""
        m = _NAME.match(text)
        name = m.group() if m else ""
        pos = m.end() if m else 0
        labels: dict[str, str] = {}
        if pos < len(text) and text[pos] == "{":
            pos += 1
            if text.startswith("}", pos) or text[pos:].lstrip().startswith("}"):
                pos = text.index("}", pos) + 1
            else:
                while True:
                    lm = _LABEL.match(text, pos)
                    if lm is None:
                        raise _Malformed(f"cannot parse labels near {text[pos:pos + 40]!r}")
                    pos = lm.end()
                    label = lm[1] if lm[1] is not None else _unescape(lm[2])
                    if lm[3] is None:
                        if name or lm[1] is not None:
                            raise _Malformed(f"label {label!r} has no value")
                        name = label  # Prometheus 3 quoted metric name: {"my.metric", a="b"}
                    elif label in labels:
                        raise _Malformed(f"duplicate label {label!r}")
                    elif len(lm[4]) > MAX_LABEL_VALUE_CHARS:
                        raise _Malformed(f"label {label[:40]!r} has a value longer than "
                                         f"{MAX_LABEL_VALUE_CHARS} characters")
                    else:
                        labels[label] = _unescape(lm[4])
                    if lm[5] == "}":
                        break
                    if text[pos:].lstrip().startswith("}"):
                        pos = text.index("}", pos) + 1
                        break
        if not name:
            raise _Malformed("line does not start with a metric name")
        return name, labels, pos

    # -- hand-off ---------------------------------------------------------------------------
    def flush(self, builder: TelemetryBuilder) -> None:
        for s in self.series:
            ts = np.frombuffer(s.ts, dtype=np.float64)
            if self.unit == "ms":
                ts = ts / 1000.0
            elif self.unit == "auto" and bool((ts > _MS_THRESHOLD).any()):
                ts = np.where(ts > _MS_THRESHOLD, ts / 1000.0, ts)
            builder.add_series(s.name, s.kind, s.labels, ts,
                               np.frombuffer(s.values, dtype=np.float64))


def parse_series_text(text: str) -> tuple[str, dict[str, str]]:
    """`name{a="x"}` -> ("name", {"a": "x"}); the inverse of `identity.render_key`."""
    try:
        name, labels, pos = _Parser._series_text(text)
    except _Malformed as exc:
        raise TelemetryError(f"cannot parse series {text[:80]!r}: {exc}") from None
    if text[pos:].strip():
        raise TelemetryError(f"cannot parse series {text[:80]!r}: text after the labels")
    return name, labels


def expand_paths(paths: Iterable[str | Path],
                 suffixes: Sequence[str] = OPENMETRICS_SUFFIXES) -> list[Path]:
    """Files as given; a directory becomes its files with one of `suffixes` (or that plus `.gz`),
    including one level of subdirectories, sorted. A missing path raises `TelemetryError`."""
    out: list[Path] = []
    wanted = tuple(suffixes) + tuple(s + ".gz" for s in suffixes)
    for p in map(Path, paths):
        if p.is_dir():
            found = [f for f in (*p.glob("*"), *p.glob("*/*"))
                     if f.is_file() and f.name.endswith(wanted)]
            if not found:
                raise TelemetryError(f"no metrics files ({', '.join(suffixes)}) in {p}")
            out.extend(sorted(found))
        elif p.is_file():
            out.append(p)
        else:
            raise TelemetryError(f"telemetry source not found: {p}")
    return out


def _open(path: Path) -> tuple[io.BufferedIOBase, io.BufferedIOBase, bool]:
    """(reader, raw file, is gzip): gzip is detected by its magic bytes; progress follows the
    raw file."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise TelemetryError(f"cannot open {path}: {exc.strerror}") from exc
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw, True
    raw.seek(0)
    return raw, raw, False


def read_openmetrics(paths: Sequence[str | Path], builder: TelemetryBuilder, *,
                     progress: Progress | None = None,
                     timestamp_unit: TimestampUnit = "auto",
                     stamp: StampFor | None = None, require_samples: bool = True,
                     ) -> ParseStats:
    """Parse OpenMetrics / Prometheus text files (plain or gzip) into `builder`.

    `timestamp_unit`: "s" (OpenMetrics), "ms" (Prometheus text format) or "auto" (a timestamp
    above 1e11 is taken as milliseconds). `progress(bytes_done, bytes_total)` is called after
    every chunk (bytes of the files on disk, i.e. compressed for gzip).

    Samples without a timestamp (a saved scrape) get `stamp(file)` as their time; without
    `stamp` they are skipped and counted, and when the builder then holds no sample at all
    `MissingTimestamps` says what is missing and how to get a time series (`snapshot.py`;
    `require_samples=False` leaves that check to a caller with more sources to read).
    """
    if timestamp_unit not in ("auto", "s", "ms"):
        raise ConfigError(f"telemetry.timestamp_unit must be auto, s or ms, not {timestamp_unit!r}")
    files = expand_paths(paths)
    total = sum(f.stat().st_size for f in files)
    parser = _Parser(timestamp_unit)
    done = 0
    for path in files:
        parser.types = {}
        parser.stamp = None if stamp is None else stamp(path)
        reader, raw, gzipped = _open(path)
        max_bytes = (max(GZIP_RATIO_FLOOR_BYTES, MAX_GZIP_RATIO * path.stat().st_size)
                     if gzipped else None)
        with raw, reader:
            def on_chunk(raw: io.BufferedIOBase = raw, before: int = done) -> None:
                if progress is not None:
                    progress(min(before + raw.tell(), total), total)
            try:
                n_lines = _read_file(parser, reader, str(path), on_chunk, max_bytes)
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
                raise TelemetryError(f"cannot read {path}: {exc}") from exc
        done += path.stat().st_size
        log.debug("read %s: %d lines", path, n_lines)
        if progress is not None:
            progress(done, total)
    parser.flush(builder)
    no_ts = list(parser.untimestamped_files)
    stats = ParseStats(len(files), total, parser.lines, parser.samples, len(parser.series),
                       parser.malformed, tuple(parser.examples), parser.skipped_created,
                       parser.untimestamped, tuple(no_ts[:_MAX_EXAMPLES]), len(no_ts),
                       parser.stamped)
    if require_samples:
        require_timestamps(stats, builder)
    if stats.malformed:
        log.debug("%d malformed lines in %d files; first: %s", stats.malformed, stats.files,
                    stats.examples[0] if stats.examples else "-")
    return stats


def require_timestamps(stats: ParseStats, builder: TelemetryBuilder) -> None:
    """`MissingTimestamps` when samples lacked a timestamp and the builder holds none at all."""
    if stats.untimestamped and builder.n_samples == 0:
        raise MissingTimestamps(missing_timestamps_message(
            stats.untimestamped, stats.untimestamped_files, stats.n_untimestamped_files))


def _read_file(parser: _Parser, reader: io.BufferedIOBase, where: str,
               on_chunk: Callable[[], None], max_bytes: int | None) -> int:
    """Feed one file's lines to the parser chunk by chunk; returns the number of lines."""
    before = parser.lines
    for batch in iter_line_batches(
            reader, where, MAX_LINE_BYTES, max_bytes=max_bytes, chunk_bytes=_CHUNK,
            max_what=f" ({MAX_GZIP_RATIO}x its size): not a metrics dump, or unpack it first"):
        parser.feed(batch, where)
        on_chunk()
    return parser.lines - before
