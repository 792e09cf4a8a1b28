"""Stream log files through the prefilter and classify the lines it lets through.

Outline:
1. open each input (file, directory walk, ``.gz``, ``-`` for stdin), refuse binary files;
2. read fixed-size chunks; keep a look-ahead tail so multi-line reports (tracebacks, torchrun's
   failure summary) can be read past a chunk boundary; memory stays flat as files grow;
3. run the combined prefilter over each chunk; for each hit, cut out its line, parse the prefix
   (time, host, rank) and classify it;
4. Python tracebacks are read forward to their final exception line, which is classified by the
   same rules and credited with the traceback's last frame.

Problems with the input never raise: they become :class:`ScanWarning`\\ s naming the file.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import time as _time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from trainguard.evidence.classify import LineContext, classify_line, event_from_rule
from trainguard.evidence.events import EvidenceLine, FailureEvent
from trainguard.evidence.lineparse import parse_prefix, shift_year_if_future, utc_year_of
from trainguard.evidence.rules import TRACEBACK_KEYWORD, RuleMatch, RuleSet
from trainguard.evidence.xid import FALLEN_OFF_START
from trainguard.taxonomy import Action, Category, Severity

CHUNK_BYTES = 4 << 20
LOOKAHEAD_BYTES = 256 << 10
MAX_LINE_BYTES = 1 << 20
MAX_EVAL_CHARS = 16 << 10
_TRACEBACK_MAX_LINES = 400

_GENERIC_NAMES = re.compile(
    r"^(?:kern|kernel|syslog|messages|dmesg|journal|stdout|stderr|output|out|err|log|logs|"
    r"train|training|rank\d*|worker\d*|slurm-\d+|job|console|nvidia|gpu|node|current)$",
    re.IGNORECASE)
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,5}: )")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC_NAME = re.compile(r"(?:Error|Exception|Exit|Interrupt|Failure|Warning)$")
_EXC_LINE = re.compile(r"^(?P<exc_type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::\s?(?P<message>.*))?$")


@dataclass(frozen=True, slots=True)
class ScanWarning:
    """Something about the input that the user should know (never fatal)."""

    path: str
    message: str


@dataclass(slots=True)
class ScanStats:
    files_read: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    lines_read: int = 0
    candidate_lines: int = 0
    events: int = 0
    seconds: float = 0.0
    warnings: list[ScanWarning] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ScanOptions:
    host_from_path: bool = False
    """Take the host name from the file path when the lines carry none."""
    default_year: int | None = None
    """Year for formats without one (syslog, glog); default: the file's modification year."""


def host_from_path(path: str, root: str | None = None) -> str | None:
    """``logs/node17/kern.log`` -> ``node17``; ``node17.log.gz`` -> ``node17``."""
    p = Path(path)
    name = p.name
    for suffix in (".gz", ".log", ".txt", ".out", ".err", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    name = re.sub(r"\.\d+$", "", name)  # kern.log.1
    for suffix in (".log", ".txt"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    if name and not _GENERIC_NAMES.match(name):
        return name
    # The directory names the host for generic file names (node17/kern.log), except for files
    # lying directly in a directory argument (its name is the collection, not a host).
    parent = p.parent.name
    if parent and parent not in (".", "/", "..") and (root is None or
                                                      Path(root).resolve() != p.parent.resolve()):
        return parent
    return None


def iter_inputs(paths: Sequence[str], warn: Callable[[ScanWarning], None]) -> Iterator[
        tuple[str, str | None]]:
    """Expand arguments to files: (path, root it came from). ``-`` is stdin."""
    for arg in paths:
        if arg == "-":
            yield "-", None
            continue
        p = Path(arg)
        if p.is_dir():
            found = False
            for dirpath, dirnames, filenames in os.walk(p, onerror=lambda e: warn(
                    ScanWarning(str(e.filename), f"cannot list directory: {e.strerror}"))):
                dirnames.sort()
                for fn in sorted(filenames):
                    found = True
                    yield os.path.join(dirpath, fn), arg
            if not found:
                warn(ScanWarning(arg, "directory contains no files"))
        elif p.exists():
            yield arg, None
        else:
            warn(ScanWarning(arg, "no such file or directory"))


def _open(path: str) -> tuple[BinaryIO, float | None]:
    if path == "-":
        return sys.stdin.buffer, None
    f = open(path, "rb")  # noqa: SIM115 - closed by the caller
    mtime = os.fstat(f.fileno()).st_mtime
    magic = f.read(2)
    f.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb"), mtime  # type: ignore[return-value]
    return f, mtime


def _strip_rank_prefix(line: str, indent: int | None = None) -> tuple[str, str, int]:
    """Split a launcher's rank prefix off; keep the body's own indentation.

    ``indent`` is how many spaces the launcher put after its prefix (taken from the traceback
    header); only those are removed, so frame lines stay indented relative to the header.
    """
    m = _RANK_PREFIX.match(line)
    if not m:
        return "", line, 0
    body = line[m.end():]
    pad = len(body) - len(body.lstrip(" ")) if indent is None else indent
    cut = min(pad, len(body) - len(body.lstrip(" ")))
    return m.group(0), body[cut:], pad


class _FileScan:
    """State for scanning one file."""

    def __init__(self, rules: RuleSet, path: str, display: str, year: int, mtime: float | None,
                 host_hint: str | None, stats: ScanStats) -> None:
        self.rules = rules
        self.path = display
        self.year = year
        self.mtime = mtime
        self.host_hint = host_hint
        self.stats = stats
        self.consumed: set[int] = set()
        self.bad_utf8 = 0
        self.long_lines = 0

    def warn(self, msg: str) -> None:
        self.stats.warnings.append(ScanWarning(self.path, msg))

    def decode(self, raw: bytes) -> str:
        text = raw.decode("utf-8", "replace")
        if "\ufffd" in text:
            self.bad_utf8 += 1
        return text.rstrip("\r")

    def context(self, line_no: int, text: str) -> LineContext:
        prefix = parse_prefix(text, self.year)
        if prefix.time is not None and self.mtime is not None and prefix.time_kind.value == \
                "absolute":
            shifted = shift_year_if_future(prefix.time, self.mtime)
            if shifted != prefix.time:
                prefix = type(prefix)(shifted, prefix.time_kind, prefix.host, prefix.rank,
                                      prefix.gpu_index)
        return LineContext(self.path, line_no, prefix, self.host_hint)

    def classify(self, line_no: int, text: str, following: Callable[[int], list[str]]) -> \
            FailureEvent | None:
        if line_no in self.consumed:
            return None
        self.stats.candidate_lines += 1
        if TRACEBACK_KEYWORD in text:
            return self.traceback(line_no, text, following(_TRACEBACK_MAX_LINES))
        ctx = self.context(line_no, text)
        after = following(200) if self._needs_after(text) else []
        ev = classify_line(self.rules, text, ctx, after)
        if ev is not None and FALLEN_OFF_START in text and "fallen off" not in text:
            # The driver's report continues on the next lines; they are part of this event.
            for offset, cont in enumerate(after[:3], start=1):
                self.consumed.add(line_no + offset)
                if "fallen off" in cont:
                    break
        return ev

    def _needs_after(self, text: str) -> bool:
        multi = self.rules.multiline_start
        return FALLEN_OFF_START in text or (multi is not None and multi.search(text) is not None)

    def traceback(self, line_no: int, header: str, after: list[str]) -> FailureEvent | None:
        """Read a traceback forward to its exception line and classify that line."""
        prefix, _, pad = _strip_rank_prefix(header)
        last_frame: str | None = None
        for offset, raw in enumerate(after, start=1):
            p, body, _ = _strip_rank_prefix(raw, pad)
            if p != prefix:
                continue  # another rank's interleaved output
            if not body.strip() or body.startswith((" ", "\t")) or body.startswith("^"):
                if fm := _FRAME.match(body):
                    last_frame = f'{fm.group("file")}:{fm.group("line")} in {fm.group("func")}'
                continue
            if body.startswith(("Traceback", "During handling", "The above exception")):
                continue
            exc = _EXC_LINE.match(body.strip())
            if exc is None or (exc.group("message") is None
                               and not _EXC_NAME.search(exc.group("exc_type"))):
                continue
            exc_no = line_no + offset
            self.consumed.add(exc_no)
            extra = [("exc_type", exc.group("exc_type"))]
            if last_frame:
                extra.append(("last_frame", last_frame))
            ctx = self.context(exc_no, raw)
            ev = classify_line(self.rules, raw, ctx, after[offset:offset + 200])
            if ev is None:
                rule = self.rules.by_id.get("python_exception")
                m = rule.pattern.search(body) if rule else None
                if rule is not None and m is not None:
                    groups = {k: v for k, v in m.groupdict().items() if v is not None}
                    ev = event_from_rule(RuleMatch(rule, groups, m.group(0)), raw, ctx)
                else:
                    ev = FailureEvent(
                        category=Category.USER_CODE_ERROR, action=Action.FIX_CODE,
                        severity=Severity.FATAL, signature="python_exception",
                        summary=body.strip()[:300], confidence=0.45,
                        time=ctx.prefix.time, time_kind=ctx.prefix.time_kind,
                        host=ctx.prefix.host or ctx.host_hint, rank=ctx.prefix.rank,
                        evidence=(EvidenceLine(self.path, exc_no, raw[:2000]),))
            known = {k for k, _ in ev.fields}
            fields = ev.fields + tuple(kv for kv in extra if kv[0] not in known)
            evidence = (EvidenceLine(self.path, line_no, header[:2000]), *ev.evidence)
            return replace(ev, fields=fields, evidence=evidence)
        return None


def scan_stream(stream: BinaryIO, fs: _FileScan, on_progress: Callable[[int], None] | None = None,
                first_line: int = 1) -> Iterator[FailureEvent]:
    """Scan one opened stream; yields events in line order."""
    stats = fs.stats
    prefilter = fs.rules.prefilter
    carry = b""
    line_base = first_line  # line number of carry[0]
    skipping_long = False
    failed = False
    while True:
        if failed:
            data, error = b"", None
        else:
            data, error = _read_chunk(stream, CHUNK_BYTES)
        if error is not None:
            # A truncated .gz or a failing disk: keep what was read, report the rest as lost.
            near = line_base + carry.count(b"\n")
            fs.warn(f"read error near line {near}: {error}; the rest of the file is skipped")
            failed = True
        eof = len(data) == 0
        stats.bytes_read += len(data)
        if on_progress is not None and data:
            on_progress(len(data))
        if skipping_long:
            nl = data.find(b"\n")
            if nl < 0 and not eof:
                continue
            data = data[nl + 1:] if nl >= 0 else b""
            line_base += 1
            stats.lines_read += 1
            skipping_long = False
        buf = carry + data if carry else data
        if not buf:
            break
        if eof:
            cut = len(buf)
        else:
            cut = buf.rfind(b"\n", 0, max(0, len(buf) - LOOKAHEAD_BYTES)) + 1
            if cut == 0:
                if len(buf) <= MAX_LINE_BYTES:
                    carry = buf
                    continue
                # One line longer than MAX_LINE_BYTES: scan its head, skip the rest.
                nl = buf.find(b"\n")
                if nl < 0 or nl > MAX_LINE_BYTES:
                    fs.long_lines += 1
                    head = buf[:MAX_LINE_BYTES]
                    yield from _scan_region(fs, prefilter, head + b"\n", len(head) + 1,
                                            line_base)
                    if nl < 0:
                        skipping_long = True
                        carry = b""
                        continue
                    buf = buf[nl + 1:]
                    line_base += 1
                    stats.lines_read += 1
                cut = buf.rfind(b"\n", 0, max(0, len(buf) - LOOKAHEAD_BYTES)) + 1
                if cut == 0:
                    carry = buf
                    continue
        yield from _scan_region(fs, prefilter, buf, cut, line_base)
        n = buf.count(b"\n", 0, cut)
        stats.lines_read += n + (1 if eof and cut and not buf.endswith(b"\n") else 0)
        line_base += n
        carry = buf[cut:]
        if eof:
            break


def _read_chunk(stream: BinaryIO, size: int) -> tuple[bytes, Exception | None]:
    """Read up to ``size`` bytes in 64 KiB pieces so a failure loses at most one piece."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            piece = stream.read(min(1 << 16, size - got))
        except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as exc:
            return b"".join(parts), exc
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts), None


def _scan_region(fs: _FileScan, prefilter: object, buf: bytes, cut: int, line_base: int
                 ) -> Iterator[FailureEvent]:
    """Classify the prefilter hits in ``buf[:cut]``; ``buf[cut:]`` is look-ahead only."""
    last_start = -1
    counted_to = 0
    line_no = line_base
    region = buf if cut == len(buf) else buf[:cut]
    for m in prefilter.finditer(region):  # type: ignore[attr-defined]
        start = buf.rfind(b"\n", 0, m.start()) + 1
        if start == last_start:
            continue
        last_start = start
        line_no += buf.count(b"\n", counted_to, start)
        counted_to = start
        end = buf.find(b"\n", start)
        if end < 0:
            end = len(buf)
        raw = buf[start:end]
        if len(raw) > MAX_EVAL_CHARS:
            fs.long_lines += 1
            lo = max(0, m.start() - start - MAX_EVAL_CHARS // 2)
            raw = raw[lo: lo + MAX_EVAL_CHARS]
        text = fs.decode(raw)
        next_start = end + 1

        def following(n: int, _from: int = next_start) -> list[str]:
            out: list[str] = []
            pos = _from
            while len(out) < n and pos < len(buf):
                e = buf.find(b"\n", pos)
                if e < 0:
                    e = len(buf)
                out.append(fs.decode(buf[pos:min(e, pos + MAX_EVAL_CHARS)]))
                pos = e + 1
            return out

        ev = fs.classify(line_no, text, following)
        if ev is not None:
            fs.stats.events += 1
            yield ev


def scan_paths(paths: Sequence[str], rules: RuleSet, options: ScanOptions = ScanOptions(),
               on_file: Callable[[str, int | None], None] | None = None,
               on_progress: Callable[[int], None] | None = None,
               ) -> tuple[list[FailureEvent], ScanStats]:
    """Scan files/directories/stdin and return all events plus statistics and warnings."""
    stats = ScanStats()
    t0 = _time.perf_counter()
    events: list[FailureEvent] = []
    for path, root in iter_inputs(paths, stats.warnings.append):
        events.extend(scan_file(path, root, rules, options, stats, on_file, on_progress))
    stats.seconds = _time.perf_counter() - t0
    return events, stats


def scan_file(path: str, root: str | None, rules: RuleSet, options: ScanOptions,
              stats: ScanStats, on_file: Callable[[str, int | None], None] | None = None,
              on_progress: Callable[[int], None] | None = None) -> Iterable[FailureEvent]:
    display = "<stdin>" if path == "-" else path
    try:
        stream, mtime = _open(path)
    except OSError as exc:
        stats.files_skipped += 1
        stats.warnings.append(ScanWarning(display, f"cannot read: {exc.strerror or exc}"))
        return []
    try:
        head = _peek(stream)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        stream.close()
        stats.files_skipped += 1
        stats.warnings.append(ScanWarning(display, f"cannot read: {exc}"))
        return []
    if head is None:
        stream.close()
        stats.files_skipped += 1
        stats.warnings.append(ScanWarning(display, "binary file skipped"))
        return []
    stream, first = head
    if on_file is not None:
        size = os.path.getsize(path) if path != "-" else None
        on_file(display, size)
    year = options.default_year or utc_year_of(mtime if mtime else _time.time())
    hint = host_from_path(path, root) if options.host_from_path and path != "-" else None
    fs = _FileScan(rules, path, display, year, mtime, hint, stats)
    stats.files_read += 1
    try:
        out = list(scan_stream(stream, fs, on_progress))
    finally:
        stream.close()
    if not first:
        fs.warn("empty file")
    if fs.bad_utf8:
        fs.warn(f"{fs.bad_utf8} matching line(s) are not valid UTF-8 (decoded with replacement)")
    if fs.long_lines:
        fs.warn(f"{fs.long_lines} line(s) longer than {MAX_EVAL_CHARS // 1024} KiB were "
                "truncated for matching")
    return out


def scan_bytes(data: bytes, rules: RuleSet, *, path: str, first_line: int = 1,
               host_hint: str | None = None, year: int | None = None,
               stats: ScanStats | None = None) -> list[FailureEvent]:
    """Classify a piece of a log held in memory (the new lines of a watched file, the tail of a
    rank's output); ``first_line`` numbers its first line for the evidence references."""
    now = _time.time()
    fs = _FileScan(rules, path, path, year or utc_year_of(now), now, host_hint,
                   stats if stats is not None else ScanStats())
    return list(scan_stream(io.BytesIO(data), fs, first_line=first_line))


def _peek(stream: BinaryIO) -> tuple[BinaryIO, bytes] | None:
    """Read the first bytes to reject binary input; returns a stream positioned at 0."""
    first = stream.read(8192)
    if b"\x00" in first:
        return None
    return _Prepend(first, stream), first  # type: ignore[return-value]


class _Prepend(io.RawIOBase):
    """A stream that yields ``head`` and then the rest of ``rest`` (works for stdin/gzip)."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._head:
            if size < 0:
                out, self._head = self._head + self._rest.read(), b""
                return out
            out = self._head[:size]
            self._head = self._head[size:]
            if len(out) < size:
                out += self._rest.read(size - len(out))
            return out
        return self._rest.read(size)

    def close(self) -> None:
        if self._rest is not sys.stdin.buffer:
            self._rest.close()
        super().close()


__all__ = ["ScanOptions", "ScanStats", "ScanWarning", "host_from_path", "iter_inputs",
           "scan_bytes", "scan_paths"]
