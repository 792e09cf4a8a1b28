"""Reading an input file whole, bounded: regular files only, at most a given size.

A path from the command line may name something endless (``/dev/zero``, ``/dev/urandom``), a
FIFO that blocks until a writer comes, or a file far larger than any real input of its kind.
`read_bounded` refuses the first two before reading a byte and stops reading one byte past the
limit, so memory stays bounded whatever the path is. It raises `UnreadableFile` with the reason;
the caller words it as one line of its own error type (``raise TraceError(...) from exc``).

    >>> read_bounded("/dev/zero", 1 << 20)
    Traceback (most recent call last):
    ...
    trainguard.fileread.UnreadableFile: not a regular file (a character device)
"""

from __future__ import annotations

import os
import stat

__all__ = ["UnreadableFile", "format_size", "read_bounded"]

_CHUNK = 1 << 20


class UnreadableFile(Exception):
    """Why a file was not read: an `OSError`'s text, not a regular file, or over the limit.

    Not a `TrainguardError` on purpose: each caller turns it into its area's error.
    """

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_large = too_large


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def format_size(n: int) -> str:
    """``64 MiB`` for whole-ish MiB sizes, else bytes."""
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of regular file `path`, at most `max_bytes`, else `UnreadableFile`.

    Regular files only (procfs files are regular, of size 0): a device, FIFO, socket or
    directory is refused before it is read (a FIFO is opened non-blocking, so the refusal does
    not wait for a writer).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"not a regular file ({_kind(mode)})")
        data = bytearray()
        while len(data) <= max_bytes:
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UnreadableFile(f"larger than {format_size(max_bytes)}", too_large=True)
    return bytes(data)
