"""Which inputs a log scan reads, and how each is opened: files, directories, ``.gz``, stdin.

Rules (issue #16: no input may hang the scan, exhaust memory or vanish without a word):

1. a directory is walked recursively; only *regular* files in it are read: a FIFO, socket or
   device found while walking is skipped with a warning (opening a FIFO would wait forever);
2. a path named explicitly may also be a pipe (``<(ssh node cat kern.log)``, ``-`` for stdin);
   a device or socket named explicitly is refused with a warning (``/dev/zero`` never ends);
3. gzip input and pipes, whose size is not known up front, are read up to
   :data:`DEFAULT_MAX_BYTES` (``ScanOptions.max_bytes``, ``--max-bytes``); the rest is reported
   as not scanned, so a 1 MB gzip of 1 GB of newlines cannot run for minutes;
4. a file is skipped as binary only when it starts with a known binary format's magic bytes or
   most of its head is not text; NUL bytes (crash-time padding of kernel logs) are not a reason
   to skip a file: the scanner drops them and reads on.

Every skip becomes a :class:`ScanWarning` naming the path.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_BYTES = 4 << 30
"""Bytes read at most from one gzip file (decompressed) or pipe."""
SNIFF_BYTES = 8192
_MAX_ODD_FRACTION = 0.3

# Formats that are never logs; compressed ones get a hint instead of a bare "binary".
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x7fELF", "ELF executable or core dump"),
    (b"PK\x03\x04", "zip archive (a torch checkpoint?)"),
    (b"\x89PNG", "PNG image"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"PAR1", "Parquet file"),
    (b"\x93NUMPY", "NumPy array"),
    (b"\xfd7zXZ\x00", "xz-compressed: decompress it first"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it first"),
    (b"BZh", "bzip2-compressed: decompress it first"),
)
# Control bytes that text logs do not contain (tab, newlines, form feed, backspace and ESC do).
_ODD_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\x0b\x0c\x08\x1b") + b"\x7f"
_ODD_TABLE = bytes.maketrans(_ODD_BYTES, b"\x00" * len(_ODD_BYTES))

_GENERIC_NAMES = re.compile(
    r"^(?:kern|kernel|syslog|messages|dmesg|journal|stdout|stderr|output|out|err|log|logs|"
    r"train|training|rank\d*|worker\d*|slurm-\d+|job|console|nvidia|gpu|node|current)$",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ScanWarning:
    """Something about the input that the user should know (never fatal)."""

    path: str
    message: str


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


def file_kind(mode: int) -> str:
    """``regular file``, ``fifo``, ``socket``, ``character device``... for a stat mode."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def iter_inputs(paths: Sequence[str], warn: Callable[[ScanWarning], None]) -> Iterator[
        tuple[str, str | None]]:
    """Expand arguments to readable inputs: (path, root it came from). ``-`` is stdin."""
    for arg in paths:
        if arg == "-":
            yield "-", None
            continue
        try:
            mode = os.stat(arg).st_mode
        except FileNotFoundError:
            warn(ScanWarning(arg, "no such file or directory"))
            continue
        except OSError as exc:
            warn(ScanWarning(arg, f"cannot read: {exc.strerror or exc}"))
            continue
        if stat.S_ISDIR(mode):
            yield from _walk(arg, warn)
        elif stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
            yield arg, None
        else:
            warn(ScanWarning(arg, f"not a regular file or pipe ({file_kind(mode)}): skipped"))


def _walk(root: str, warn: Callable[[ScanWarning], None]) -> Iterator[tuple[str, str | None]]:
    found = False
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: warn(
            ScanWarning(str(e.filename), f"cannot list directory: {e.strerror}"))):
        dirnames.sort()
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            found = True
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                warn(ScanWarning(path, f"cannot read: {exc.strerror or exc}"))
                continue
            if stat.S_ISREG(mode):
                yield path, root
            else:
                warn(ScanWarning(path, f"not a regular file ({file_kind(mode)}): skipped"))
    if not found:
        warn(ScanWarning(root, "directory contains no files"))


@dataclass(slots=True)
class OpenedInput:
    """An input opened for scanning."""

    stream: BinaryIO
    mtime: float | None
    size: int | None
    """Bytes on disk for a regular file; ``None`` for pipes."""
    bounded: bool
    """Whether ``max_bytes`` applies (gzip and pipes: their length is not known up front)."""


def open_input(path: str) -> OpenedInput:
    """Open ``path`` (``-``: stdin) for reading; gzip is decompressed. Raises ``OSError``."""
    if path == "-":
        return OpenedInput(_Stdin(sys.stdin.buffer), None, None,  # type: ignore[arg-type]
                           True)
    f = open(path, "rb")  # noqa: SIM115 - closed by the caller
    st = os.fstat(f.fileno())
    regular = stat.S_ISREG(st.st_mode)
    if not regular:
        return OpenedInput(f, st.st_mtime, None, True)
    magic = f.read(2)
    f.seek(0)
    if magic == b"\x1f\x8b":
        return OpenedInput(gzip.GzipFile(fileobj=f, mode="rb"), st.st_mtime,  # type: ignore[arg-type]
                           st.st_size, True)
    return OpenedInput(f, st.st_mtime, st.st_size, False)


def binary_reason(head: bytes) -> str | None:
    """Why ``head`` (a file's first bytes) is not a text log, or ``None`` when it is one.

    NUL bytes do not count: kernel logs written during a crash are NUL-padded and still hold
    the lines that matter. What is left after dropping them is binary when it starts with a known
    format's magic bytes, or when over 30 % of it are control bytes text never contains.
    """
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    text = head.replace(b"\x00", b"")
    if not text:
        return None
    odd = len(text) - len(text.translate(_ODD_TABLE).replace(b"\x00", b""))
    if odd > _MAX_ODD_FRACTION * len(text):
        return f"{100 * odd // len(text)}% control bytes"
    return None


def sniff(stream: BinaryIO) -> tuple[BinaryIO, bytes]:
    """Read the first bytes; returns a stream that still yields them, and the bytes."""
    first = stream.read(SNIFF_BYTES)
    return _Prepend(first, stream), first  # type: ignore[return-value]


class BoundedReader(io.RawIOBase):
    """Yields at most ``limit`` bytes of ``inner``; ``truncated`` tells whether more was there."""

    def __init__(self, inner: BinaryIO, limit: int) -> None:
        self._inner = inner
        self._left = limit
        self.truncated = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            if not self.truncated and self._inner.read(1):
                self.truncated = True
            return b""
        want = self._left if size < 0 else min(size, self._left)
        data = self._inner.read(want)
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._inner.close()
        super().close()


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
        self._rest.close()
        super().close()


class _Stdin(io.RawIOBase):
    """stdin's buffer, left open when the scan closes its stream."""

    def __init__(self, inner: BinaryIO) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._inner.read(size)


__all__ = ["DEFAULT_MAX_BYTES", "BoundedReader", "OpenedInput", "ScanWarning", "binary_reason",
           "file_kind", "host_from_path", "iter_inputs", "open_input", "sniff"]
