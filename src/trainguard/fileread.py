"""Reading an input file whole, bounded: regular files only, at most a given size.

A path from the command line may name something endless (``/dev/zero``, ``/dev/urandom``), a
FIFO that blocks until a writer comes, or a file far larger than any real input of its kind.
`read_bounded` refuses the first two before reading a byte (with `pipe_wait_s` a named pipe is
read once its writer comes, within that time) and stops reading one byte past the limit, so
memory stays bounded whatever the path is. It raises `UnreadableFile` with the reason;
the caller words it as one line of its own error type (``raise TraceError(...) from exc``).

    >>> read_bounded("/dev/zero", 1 << 20)
    Traceback (most recent call last):
    ...
    trainguard.fileread.UnreadableFile: not a regular file (a character device)
"""

from __future__ import annotations

import os
import select
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


def _readable_within(fd: int, timeout_s: float) -> bool:
    """Whether a pipe has data or its writer has come and gone (EOF) within ``timeout_s``; a
    named pipe that never had a writer reports nothing on Linux, so it times out."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(timeout_s * 1000))


def read_bounded(path: str | os.PathLike[str], max_bytes: int, *,
                 pipe_wait_s: float | None = None) -> bytes:
    """The bytes of regular file `path`, at most `max_bytes`, else `UnreadableFile`.

    Regular files only (procfs files are regular, of size 0): a device, FIFO, socket or
    directory is refused before it is read (a FIFO is opened non-blocking, so the refusal does
    not wait for a writer). With `pipe_wait_s`, a FIFO (``--token-file <(pass show x)``) is read
    too, once it has data or its writer has come and gone within that many seconds.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) and pipe_wait_s is not None:
            if not _readable_within(fd, pipe_wait_s):
                raise UnreadableFile(f"a pipe nobody wrote to within {pipe_wait_s:g} s")
            os.set_blocking(fd, True)
        elif not stat.S_ISREG(mode):
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
