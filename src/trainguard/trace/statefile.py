"""A rank's collective state in a small memory-mapped file: cheap to update on every collective,
readable by the supervisor while the rank is stopped, hung in C code, or dead.

Layout (little-endian, one page)::

    header  magic "TGTRACE1", version, seqlock, rank, pid, step, updated, span start, span name,
            number of groups
    slot i  group name, group size, entered seq, completed seq, op, bytes, entered, ended
            (for the last collective entered in that group; NaN: not ended)

The writer bumps ``seqlock`` to odd before an update and to even after; a reader retries while
it is odd or changed under it. A writer stopped in the middle of an update (SIGSTOP) leaves it
odd forever: after a few retries the reader takes what is there and says ``torn``.

The state is only as fresh as the filesystem makes it for the reader: on a local disk (or
tmpfs) the supervisor sees every update at once; through NFS from another host, only after
writeback.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import TraceError
from trainguard.trace.model import CollectiveCall, GroupState, RankState

MAGIC = b"TGTRACE1"
VERSION = 1
SIZE = 4096
MAX_GROUPS = 16
_NAME = 32
_HEADER = struct.Struct(f"<8sIIiiqdd{_NAME}sI")
_SLOT = struct.Struct(f"<{_NAME}siqq{_NAME}sqdd")
_SEQLOCK_AT = 12  # offset of the seqlock word in the header
_READ_TRIES = 50
assert _HEADER.size + MAX_GROUPS * _SLOT.size <= SIZE


def _name(text: str) -> bytes:
    return text.encode("utf-8", "replace")[:_NAME]


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("utf-8", "replace")


class StateWriter:
    """The writing side, in the training process (not thread-safe: the tracer holds a lock).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rank0.trace"
    >>> w = StateWriter(path, rank=0)
    >>> slot = w.group("world", 2)
    >>> w.enter(slot, 1, "all_reduce", 4096, 100.0)
    >>> read_state(path).state.groups["world"].inside
    True
    >>> w.close()
    """

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._lock_word = 0
        self._groups: dict[str, int] = {}
        # per slot: [name bytes, size, entered, completed, op bytes, nbytes, entered at]
        self._slots: list[list[object]] = []
        self._rank = rank
        self._step = -1
        self._updated = 0.0
        self._span = ""
        self._span_start = math.nan
        self._write_header()

    def _begin(self) -> None:
        self._lock_word += 1
        struct.pack_into("<I", self._map, _SEQLOCK_AT, self._lock_word & 0xFFFFFFFF)

    def _end(self) -> None:
        self._lock_word += 1
        struct.pack_into("<I", self._map, _SEQLOCK_AT, self._lock_word & 0xFFFFFFFF)

    def _write_header(self) -> None:
        self._begin()
        _HEADER.pack_into(self._map, 0, MAGIC, VERSION, (self._lock_word & 0xFFFFFFFF),
                          self._rank, os.getpid(), self._step, self._updated, self._span_start,
                          _name(self._span), len(self._groups))
        self._end()

    def group(self, name: str, size: int) -> int:
        """The slot of process group `name` (allocated on first use); -1 when all are taken."""
        slot = self._groups.get(name)
        if slot is not None:
            return slot
        if len(self._groups) >= MAX_GROUPS:
            return -1
        slot = len(self._groups)
        self._groups[name] = slot
        self._slots.append([_name(name), size, 0, 0, b"", 0, math.nan])
        self._begin()
        _SLOT.pack_into(self._map, _HEADER.size + slot * _SLOT.size, _name(name), size, 0, 0,
                        b"", 0, math.nan, math.nan)
        self._end()
        self._write_header()
        return slot

    def enter(self, slot: int, seq: int, op: str, nbytes: int, now: float) -> None:
        if slot < 0:
            return
        row = self._slots[slot]
        row[2], row[4], row[5], row[6] = seq, _name(op), nbytes, now
        self._pack(slot, row, math.nan)

    def complete(self, slot: int, seq: int, now: float) -> None:
        if slot < 0:
            return
        row = self._slots[slot]
        row[3] = max(row[3], seq)  # type: ignore[call-overload]
        self._pack(slot, row, now if seq == row[2] else math.nan)

    def _pack(self, slot: int, row: list[object], ended: float) -> None:
        self._begin()
        _SLOT.pack_into(self._map, _HEADER.size + slot * _SLOT.size, *row, ended)
        self._end()

    def step(self, step: int, now: float) -> None:
        self._step, self._updated = step, now
        self._write_header()

    def span(self, name: str | None, now: float) -> None:
        self._span = name or ""
        self._span_start = now if name else math.nan
        self._updated = now
        self._write_header()

    def close(self) -> None:
        if not self._map.closed:
            self._map.close()


@dataclass(frozen=True, slots=True)
class StateRead:
    """What a state file said; ``torn`` when the writer stopped in the middle of an update."""

    state: RankState
    torn: bool
    span_started: float | None


def _decode(raw: bytes, path: Path) -> tuple[int, StateRead]:
    magic, version, lock, rank, pid, step, updated, span_start, span, n = \
        _HEADER.unpack_from(raw, 0)
    if magic != MAGIC:
        raise TraceError(f"{path}: not a trainguard trace state file")
    if version != VERSION:
        raise TraceError(f"{path}: trace state version {version}, this trainguard reads "
                         f"{VERSION}")
    groups: dict[str, GroupState] = {}
    for slot in range(min(n, MAX_GROUPS)):
        name, size, entered, completed, op, nbytes, t_in, t_end = _SLOT.unpack_from(
            raw, _HEADER.size + slot * _SLOT.size)
        group = _text(name)
        last = None
        if entered > 0:
            last = CollectiveCall(seq=entered, op=_text(op), group=group, group_size=size,
                                  nbytes=nbytes, entered=None if math.isnan(t_in) else t_in,
                                  started=None, ended=None if math.isnan(t_end) else t_end)
        groups[group] = GroupState(group, entered, completed, last)
    state = RankState(rank=rank, groups=groups, step=None if step < 0 else step,
                      span=_text(span) or None, updated=updated or None, pid=pid or None,
                      source="trainguard")
    return lock, StateRead(state, torn=False,
                           span_started=None if math.isnan(span_start) else span_start)


def read_state(path: Path) -> StateRead:
    """Read a rank's state file; `TraceError` when it is missing, short or not one."""
    try:
        with path.open("rb") as f:
            first = f.read(SIZE)
            if len(first) < SIZE:
                raise TraceError(f"{path}: truncated trace state file ({len(first)} bytes)")
            for _ in range(_READ_TRIES):
                lock, read = _decode(first, path)
                f.seek(0)
                again = f.read(SIZE)
                if lock % 2 == 0 and again == first:
                    return read
                first = again
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    _, read = _decode(first, path)
    return StateRead(read.state, torn=True, span_started=read.span_started)


__all__ = ["MAGIC", "MAX_GROUPS", "SIZE", "StateRead", "StateWriter", "read_state"]
