"""Split a byte stream into batches of lines in bounded time and memory.

The OpenMetrics reader parses line by line in Python, so what it is handed must stay bounded
whatever the input is:

1. the stream is read in chunks; the unfinished last line is carried to the next chunk, but
   never beyond `max_line_bytes`: a longer line is dropped as it streams past (never held whole)
   and its line number is reported;
2. when a chunk is mostly empty lines, their runs are collapsed in C (a file of a billion
   newlines costs seconds, not a billion Python iterations); `LineBatch.lineno` still gives
   true line numbers;
3. the stream may yield at most `max_bytes` (a gzip bomb stops there with `TelemetryError`).

    >>> import io
    >>> (batch,) = iter_line_batches(io.BytesIO(b"a\\n\\nb\\n"), "f", 1 << 20)
    >>> batch.lines, batch.lineno(2), batch.n_lines
    ([b'a', b'', b'b'], 3, 3)
"""

from __future__ import annotations

import io
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from trainguard.errors import TelemetryError
from trainguard.telemetry.limits import format_bytes

__all__ = ["LineBatch", "iter_line_batches"]

_BLANK_RUN = re.compile(rb"\n\n+")
_FEW_BLANKS = 1024
"""Up to this many empty lines per chunk (or a quarter of its lines) go through the parser."""


@dataclass(frozen=True, slots=True)
class LineBatch:
    """Consecutive lines (empty runs collapsed) and the true number of lines they stand for.

    `too_long` are the line numbers of over-long lines skipped since the previous batch (not
    counted in `n_lines`).
    """

    lines: list[bytes]
    first_lineno: int
    n_lines: int
    too_long: tuple[int, ...] = ()
    gap_at: tuple[int, ...] = ()
    """Where runs of blank lines were removed: from `lines[gap_at[j]]` on ..."""
    gap_total: tuple[int, ...] = ()
    """... `gap_total[j]` lines in all are missing before (cumulative)."""

    def lineno(self, i: int) -> int:
        """1-based line number in the file of `lines[i]`."""
        j = bisect_right(self.gap_at, i) - 1
        return self.first_lineno + i + (self.gap_total[j] if j >= 0 else 0)


def _collapse(data: bytes) -> tuple[bytes, tuple[int, ...], tuple[int, ...], int]:
    """`data` with each run of newlines made one; where lines were removed, and how many."""
    at: list[int] = []
    total: list[int] = []
    removed = pos = newlines = 0
    for m in _BLANK_RUN.finditer(data):
        newlines += data.count(b"\n", pos, m.start())
        run = m.end() - m.start()
        at.append(newlines - removed + 1)  # index of the line after the run, once collapsed
        removed += run - 1
        total.append(removed)
        newlines += run
        pos = m.end()
    return _BLANK_RUN.sub(b"\n", data), tuple(at), tuple(total), removed


def iter_line_batches(reader: io.BufferedIOBase | io.RawIOBase, where: str, max_line_bytes: int,
                      *, max_bytes: int | None = None, chunk_bytes: int = 4 << 20,
                      max_what: str = "") -> Iterator[LineBatch]:
    """Batches of complete lines from `reader` (the last line may lack its newline)."""
    lineno = 1
    tail = b""
    skipping = False  # inside an over-long line: drop bytes up to its end
    too_long: list[int] = []
    read = 0
    while True:
        data = reader.read(chunk_bytes)
        if not data:
            break
        read += len(data)
        if max_bytes is not None and read > max_bytes:
            raise TelemetryError(
                f"{where}: decompresses to more than {format_bytes(max_bytes)}{max_what}")
        if skipping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data = data[nl + 1:]
            skipping = False
            lineno += 1
        if tail:
            data = tail + data
        lines = data.split(b"\n")
        tail = lines.pop()
        if not lines:
            if len(tail) > max_line_bytes:
                too_long.append(lineno)
                tail, skipping = b"", True
            continue
        n = len(lines)
        at: tuple[int, ...] = ()
        total: tuple[int, ...] = ()
        if lines.count(b"") > max(_FEW_BLANKS, n // 4):  # a few blank lines are cheap as lines
            body, at, total, _ = _collapse(data[:len(data) - len(tail)])
            lines = body.split(b"\n")
            lines.pop()  # the empty text after the final newline
        yield LineBatch(lines, lineno, n, tuple(too_long), at, total)
        too_long = []
        lineno += n
        if len(tail) > max_line_bytes:
            too_long.append(lineno)
            tail, skipping = b"", True
    if tail or too_long:
        lines = [tail] if tail else []
        yield LineBatch(lines, lineno, len(lines), tuple(too_long))
