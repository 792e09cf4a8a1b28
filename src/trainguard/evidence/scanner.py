"""Stream log files through the prefilter and classify the lines it lets through.

Outline:
1. open each input (file, directory walk, ``.gz``, ``-`` for stdin; see ``inputs.py`` for what
   is skipped and what is bounded), refuse binary files;
2. read fixed-size chunks, dropping NUL bytes (crash-time padding); keep a look-ahead tail so
   multi-line reports (tracebacks, torchrun's failure summary) can be read past a chunk
   boundary; memory stays flat as files grow (``scan_paths`` can fold repeats of one event);
3. run the combined prefilter over each chunk; for each hit, cut out its line, read it as the
   program wrote it (``unwrap.py``: no ANSI colour, no ``kubectl logs --prefix``,
   out of Docker's json-file record; evidence keeps the line as read), parse the prefix (time,
   host, rank) and classify it;
4. Python tracebacks are read forward to their final exception line (``tracebacks.py``), which
   is classified by the same rules and credited with the traceback's last frame;
5. each file keeps a little context (``context.py``): a storage error inside a checkpoint save is
   a checkpoint failure, a timeout while this rank still saves is a stalled save, a run of
   loss-scale overflows is numerical trouble. With ``ScanOptions.suspicious_lines`` the prefilter
   also lets through failure words no rule explains (``suspicion.py``).

Problems with the input never raise: they become :class:`ScanWarning`\\ s naming the file.
"""

from __future__ import annotations

import gzip
import io
import time as _time
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from trainguard.evidence.aggregate import EventAggregator
from trainguard.evidence.classify import LineContext, classify_line
from trainguard.evidence.context import FileContext, checkpoint_io
from trainguard.evidence.events import STORED_CHARS, EvidenceLine, FailureEvent
from trainguard.evidence.inputs import (
    DEFAULT_MAX_BYTES,
    BoundedReader,
    ScanWarning,
    binary_reason,
    host_from_path,
    iter_inputs,
    open_input,
    sniff,
)
from trainguard.evidence.lineparse import parse_prefix, shift_year_if_future, utc_year_of
from trainguard.evidence.rules import (
    MAX_BLOCK_CHARS,
    MAX_LINE_CHARS,
    TRACEBACK_KEYWORD,
    RuleSet,
)
from trainguard.evidence.suspicion import WORDS_SOURCE
from trainguard.evidence.tracebacks import (
    find_exception_line,
    python_exception_event,
    with_traceback,
)
from trainguard.evidence.unwrap import unwrap_line
from trainguard.evidence.xid import FALLEN_OFF_START

CHUNK_BYTES = 4 << 20
LOOKAHEAD_BYTES = 256 << 10
MAX_LINE_BYTES = 1 << 20
MAX_EVAL_CHARS = MAX_LINE_CHARS
_TRACEBACK_MAX_LINES = 400
_FOLLOWING_MAX_BYTES = 2 * MAX_BLOCK_CHARS
CONTEXT_LINES = 5
"""Lines kept either side of each matched line for the text model (``FailureEvent.context``)."""
CONTEXT_CHARS = 400
"""A neighbour is kept to this many characters of the line as the program wrote it."""
_CONTEXT_RAW_BYTES = 16 * CONTEXT_CHARS
"""How much of a neighbour is read to unwrap it (a Docker json-file record escapes each
non-ASCII character in six)."""



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
    max_bytes: int = DEFAULT_MAX_BYTES
    """Bytes read at most from one gzip file (decompressed) or pipe; the rest is reported as
    not scanned."""
    merge_gap_s: float | None = None
    """Fold repeats of one event at most this many seconds apart into one event with a
    ``repeats`` count (see ``aggregate.py``), so memory stays bounded however many lines match;
    keep it no larger than the correlation window. ``None``: one event per matching line."""
    suspicious_lines: bool = False
    """Also report lines that no signature explains but that carry failure words (error, fatal,
    killed, lost...) as informational ``failure_words`` events (``suspicion.py``), so a log
    with no known signature still says why it looks failed."""

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError("scan.max_bytes must be > 0")
        if self.merge_gap_s is not None and self.merge_gap_s < 0:
            raise ValueError("scan.merge_gap_s must be >= 0")


class _FileScan:
    """State for scanning one file."""

    def __init__(self, rules: RuleSet, path: str, display: str, year: int, mtime: float | None,
                 host_hint: str | None, stats: ScanStats, suspicious: bool = False) -> None:
        self.rules = rules
        self.suspicious = suspicious
        self.prefilter: object = rules.widened_prefilter(WORDS_SOURCE) if suspicious \
            else rules.prefilter
        self.path = display
        self.year = year
        self.mtime = mtime
        self.host_hint = host_hint
        self.stats = stats
        self.consumed: set[int] = set()
        self.file_context = FileContext()
        self.bad_utf8 = 0
        self.long_lines = 0
        self.nul_bytes = 0

    def warn(self, msg: str) -> None:
        self.stats.warnings.append(ScanWarning(self.path, msg))

    def decode(self, raw: bytes) -> str:
        text = raw.decode("utf-8", "replace")
        if "\ufffd" in text:
            self.bad_utf8 += 1
        return text.rstrip("\r")

    def context(self, line_no: int, text: str, raw: str | None = None) -> LineContext:
        prefix = parse_prefix(text, self.year)
        if prefix.time is not None and self.mtime is not None and prefix.time_kind.value == \
                "absolute":
            shifted = shift_year_if_future(prefix.time, self.mtime)
            if shifted != prefix.time:
                prefix = type(prefix)(shifted, prefix.time_kind, prefix.host, prefix.rank,
                                      prefix.gpu_index)
        return LineContext(self.path, line_no, prefix, self.host_hint,
                           None if raw == text else raw)

    def classify(self, line_no: int, raw: str, following: Callable[[int], list[str]]) -> \
            FailureEvent | None:
        """Classify the line as the program wrote it (``unwrap_line``); its evidence keeps
        ``raw``."""
        if line_no in self.consumed:
            return None
        self.stats.candidate_lines += 1
        text = unwrap_line(raw)
        if TRACEBACK_KEYWORD in text:
            return self.traceback(line_no, raw, text, following(_TRACEBACK_MAX_LINES))
        ctx = self.context(line_no, text, raw)
        after = [unwrap_line(x) for x in following(200)] if self._needs_after(text) else []
        ev = self.file_context.observe(
            line_no, text, classify_line(self.rules, text, ctx, after, self.suspicious))
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

    def traceback(self, line_no: int, header: str, header_text: str, raw_after: list[str]
                  ) -> FailureEvent | None:
        """Read a traceback forward to its exception line and classify that line (``header``
        as read, ``header_text`` unwrapped)."""
        after = [unwrap_line(x) for x in raw_after]
        found = find_exception_line(header_text, after)
        if found is None:
            return None
        exc_no = line_no + found.offset
        self.consumed.add(exc_no)
        ctx = self.context(exc_no, found.raw, raw_after[found.offset - 1])
        ev = classify_line(self.rules, found.raw, ctx, after[found.offset:found.offset + 200])
        if ev is None:
            ev = python_exception_event(self.rules, found, ctx)
        ev = with_traceback(ev, found, EvidenceLine(self.path, line_no, header[:STORED_CHARS]))
        return self.file_context.observe(exc_no, found.raw,
                                         checkpoint_io(ev, found.frames, found.raw))


def scan_stream(stream: BinaryIO, fs: _FileScan, on_progress: Callable[[int], None] | None = None,
                first_line: int = 1) -> Iterator[FailureEvent]:
    """Scan one opened stream; yields events in line order."""
    stats = fs.stats
    prefilter = fs.prefilter
    carry = b""
    line_base = first_line  # line number of carry[0]
    skipping_long = False
    failed = False
    while True:
        if failed:
            parts: list[bytes] = []
            got, error = 0, None
        else:
            parts, got, error = _read_pieces(stream, CHUNK_BYTES)
        if error is not None:
            # A truncated .gz or a failing disk: keep what was read, report the rest as lost.
            near = line_base + carry.count(b"\n")
            fs.warn(f"read error near line {near}: {error}; the rest of the file is skipped")
            failed = True
        eof = got == 0
        stats.bytes_read += got
        if on_progress is not None and got:
            on_progress(got)
        if any(b"\x00" in p for p in parts):
            # Kernel logs written during a crash are NUL-padded: drop the bytes, keep the lines.
            parts = [p.replace(b"\x00", b"") for p in parts]
            fs.nul_bytes += got - sum(map(len, parts))
        if skipping_long:
            data = b"".join(parts)
            nl = data.find(b"\n")
            if nl < 0 and not eof:
                continue
            parts = [data[nl + 1:]] if nl >= 0 else []
            line_base += 1
            stats.lines_read += 1
            skipping_long = False
        # One copy: the carried-over tail and the pieces just read, joined at once.
        buf = b"".join((carry, *parts)) if carry else b"".join(parts)
        if not buf:
            if eof:
                break
            continue
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
        n = yield from _scan_region(fs, prefilter, buf, cut, line_base)
        stats.lines_read += n + (1 if eof and cut and not buf.endswith(b"\n") else 0)
        line_base += n
        carry = buf[cut:]
        if eof:
            break


def _read_pieces(stream: BinaryIO, size: int) -> tuple[list[bytes], int, Exception | None]:
    """Read up to ``size`` bytes in 64 KiB pieces so a failure loses at most one piece; returns
    the pieces (joined once by the caller, with the carried-over tail) and their total size."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            piece = stream.read(min(1 << 16, size - got))
        except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as exc:
            return parts, got, exc
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return parts, got, None


def _scan_region(fs: _FileScan, prefilter: object, buf: bytes, cut: int, line_base: int
                 ) -> Generator[FailureEvent, None, int]:
    """Classify the prefilter hits in ``buf[:cut]``; ``buf[cut:]`` is look-ahead only.

    Returns the number of line ends in ``buf[:cut]``, counted on the way to the hits: every
    byte is counted once (counting is a good part of the time spent outside the prefilter).
    """
    last_start = -1
    counted_to = 0
    line_no = line_base
    # A view, not a copy; the prefilter sees exactly ``buf[:cut]`` as its whole text.
    region = buf if cut == len(buf) else memoryview(buf)[:cut]
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
            # Up to n lines, but no more than _FOLLOWING_MAX_BYTES of them: the cost per
            # candidate line stays bounded however long the lines after it are.
            out: list[str] = []
            pos = _from
            budget = _FOLLOWING_MAX_BYTES
            while len(out) < n and pos < len(buf) and budget > 0:
                e = buf.find(b"\n", pos)
                if e < 0:
                    e = len(buf)
                stop = min(e, pos + MAX_EVAL_CHARS, pos + budget)
                out.append(fs.decode(buf[pos:stop]))
                budget -= stop - pos + 1
                pos = e + 1
            return out

        ev = fs.classify(line_no, text, following)
        if ev is not None:
            fs.stats.events += 1
            yield replace(ev, context=_neighbours(fs, buf, start, end, line_no))
    return line_no - line_base + buf.count(b"\n", counted_to, cut)


def _neighbours(fs: _FileScan, buf: bytes, start: int, end: int, line_no: int
                ) -> tuple[EvidenceLine, ...]:
    """Up to :data:`CONTEXT_LINES` lines either side of ``buf[start:end]`` (line ``line_no``)
    that ``buf`` holds, each as the program wrote it (``unwrap_line``: out of a collector's
    record before it is cut) and cut at :data:`CONTEXT_CHARS` characters: what the text model
    reads around a matched line."""
    before: list[EvidenceLine] = []
    pos = start
    for k in range(1, CONTEXT_LINES + 1):
        if pos <= 0:
            break
        s = buf.rfind(b"\n", 0, pos - 1) + 1
        before.append(_neighbour(fs.path, line_no - k, buf[s:min(pos - 1, s + _CONTEXT_RAW_BYTES)]))
        pos = s
    after: list[EvidenceLine] = []
    pos = end + 1
    for k in range(1, CONTEXT_LINES + 1):
        if pos >= len(buf):
            break
        e = buf.find(b"\n", pos)
        e = len(buf) if e < 0 else e
        after.append(_neighbour(fs.path, line_no + k, buf[pos:min(e, pos + _CONTEXT_RAW_BYTES)]))
        pos = e + 1
    return (*reversed(before), *after)


def _neighbour(path: str, line_no: int, raw: bytes) -> EvidenceLine:
    return EvidenceLine(path, line_no,
                        unwrap_line(raw.decode("utf-8", "replace"))[:CONTEXT_CHARS])


def scan_paths(paths: Sequence[str], rules: RuleSet, options: ScanOptions = ScanOptions(),
               on_file: Callable[[str, int | None], None] | None = None,
               on_progress: Callable[[int], None] | None = None,
               ) -> tuple[list[FailureEvent], ScanStats]:
    """Scan files/directories/stdin and return the events plus statistics and warnings.

    With ``options.merge_gap_s`` repeats of one event are folded into one event with a
    ``repeats`` count; ``stats.events`` counts every matching line either way.
    """
    stats = ScanStats()
    t0 = _time.perf_counter()
    events: list[FailureEvent] = []
    folded = EventAggregator(options.merge_gap_s) if options.merge_gap_s is not None else None
    for path, root in iter_inputs(paths, stats.warnings.append):
        for ev in scan_file(path, root, rules, options, stats, on_file, on_progress):
            if folded is not None:
                folded.add(ev)
            else:
                events.append(ev)
    stats.seconds = _time.perf_counter() - t0
    return (folded.events() if folded is not None else events), stats


def scan_file(path: str, root: str | None, rules: RuleSet, options: ScanOptions,
              stats: ScanStats, on_file: Callable[[str, int | None], None] | None = None,
              on_progress: Callable[[int], None] | None = None) -> Iterator[FailureEvent]:
    """Events of one input, in line order; problems become warnings in ``stats``."""
    display = "<stdin>" if path == "-" else path
    try:
        opened = open_input(path)
    except OSError as exc:
        stats.files_skipped += 1
        stats.warnings.append(ScanWarning(display, f"cannot read: {exc.strerror or exc}"))
        return
    try:
        stream, first = sniff(opened.stream)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        opened.stream.close()
        stats.files_skipped += 1
        stats.warnings.append(ScanWarning(display, f"cannot read: {exc}"))
        return
    if (why := binary_reason(first)) is not None:
        stream.close()
        stats.files_skipped += 1
        stats.warnings.append(ScanWarning(display, f"binary file skipped ({why})"))
        return
    bounded = BoundedReader(stream, options.max_bytes) if opened.bounded else None
    if on_file is not None:
        on_file(display, opened.size)
    year = options.default_year or utc_year_of(opened.mtime or _time.time())
    hint = host_from_path(path, root) if options.host_from_path and path != "-" else None
    # A year the user gave is kept as given: the "later than the file, so last year" shift is
    # part of guessing the year from the modification time.
    fs = _FileScan(rules, path, display, year,
                   None if options.default_year else opened.mtime, hint, stats,
                   options.suspicious_lines)
    stats.files_read += 1
    try:
        yield from scan_stream(bounded or stream, fs, on_progress)  # type: ignore[arg-type]
    finally:
        (bounded or stream).close()
    _file_warnings(fs, first, bounded, options.max_bytes)


def _file_warnings(fs: _FileScan, first: bytes, bounded: BoundedReader | None,
                   max_bytes: int) -> None:
    if not first:
        fs.warn("empty file")
    if fs.nul_bytes:
        fs.warn(f"{fs.nul_bytes:,} NUL byte(s) dropped (crash-time padding?); the text around "
                "them was scanned")
    if fs.bad_utf8:
        fs.warn(f"{fs.bad_utf8} matching line(s) are not valid UTF-8 (decoded with replacement)")
    if fs.long_lines:
        fs.warn(f"{fs.long_lines} line(s) longer than {MAX_EVAL_CHARS // 1024} KiB were "
                "truncated for matching")
    if bounded is not None and bounded.truncated:
        fs.warn(f"stopped after {max_bytes:,} bytes (--max-bytes); the rest was not scanned")


def scan_bytes(data: bytes, rules: RuleSet, *, path: str, first_line: int = 1,
               host_hint: str | None = None, year: int | None = None,
               stats: ScanStats | None = None) -> list[FailureEvent]:
    """Classify a piece of a log held in memory (the new lines of a watched file, the tail of a
    rank's output); ``first_line`` numbers its first line for the evidence references."""
    now = _time.time()
    fs = _FileScan(rules, path, path, year or utc_year_of(now), now, host_hint,
                   stats if stats is not None else ScanStats())
    return list(scan_stream(io.BytesIO(data), fs, first_line=first_line))


__all__ = ["ScanOptions", "ScanStats", "ScanWarning", "host_from_path", "iter_inputs",
           "scan_bytes", "scan_file", "scan_paths", "scan_stream"]
