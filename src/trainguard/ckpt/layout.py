"""Where the bytes of a tensor checkpoint go: storages in one logical stream, striped over files.

Pure arithmetic, no I/O and no torch:

1. `place` lays the tensor storages end to end in one logical byte stream, each starting at a
   multiple of `ALIGN` (the gaps are zero bytes).
2. `StripeLayout` cuts the stream into chunks of ``stripe_bytes`` and deals them round-robin to
   ``streams`` files, as RAID-0 does: chunk ``j`` goes to file ``j % streams``. Each file is
   written by its own thread, front to back, so every stream is sequential, and since the
   snapshot fills the stream from the front, all streams have work as soon as the first
   ``streams`` chunks are copied.
3. A reader reads each chunk back to its place in one page-aligned buffer of the whole stream;
   each storage is a view of its slice. Storages of `PAGE_FROM` bytes or more start on a page
   (`PAGE`), so with page-multiple stripes every whole chunk can use O_DIRECT both ways.

>>> layout = StripeLayout(total_bytes=10, stripe_bytes=4, streams=2)
>>> layout.chunks(0), layout.chunks(1)
([(0, 4), (8, 2)], [(4, 4)])
>>> layout.file_size(0), layout.file_size(1)
(6, 4)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.errors import CheckpointError, ConfigError

__all__ = ["ALIGN", "PAGE", "PAGE_FROM", "StripeLayout", "place"]

ALIGN = 64
"""Storages start at multiples of this many bytes in the logical stream..."""
PAGE = 4096
"""...and large ones (`PAGE_FROM` bytes or more) at multiples of this."""
PAGE_FROM = 1 << 16


def place(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Offsets of storages of `sizes` bytes laid end to end (each at a multiple of `ALIGN`, or
    of `PAGE` when large), and the stream's total length (the end of the last storage).

    >>> place([10, 0, 70, 1, 70000])
    ([0, 64, 64, 192, 4096], 74096)
    """
    offsets: list[int] = []
    end = 0
    for size in sizes:
        align = PAGE if size >= PAGE_FROM else ALIGN
        start = -(-end // align) * align
        offsets.append(start)
        end = start + size
    return offsets, end


@dataclass(frozen=True, slots=True)
class StripeLayout:
    """A logical stream of `total_bytes` dealt over `streams` files in `stripe_bytes` chunks."""

    total_bytes: int
    """Length of the logical stream."""
    stripe_bytes: int
    """Chunk size: consecutive chunks go to consecutive files."""
    streams: int
    """Number of files (each written and read by its own thread)."""

    def __post_init__(self) -> None:
        if self.total_bytes < 0:
            raise ConfigError(f"checkpoint total_bytes must be >= 0, got {self.total_bytes}")
        if self.stripe_bytes < 1:
            raise ConfigError(f"checkpoint stripe size must be >= 1 byte, got {self.stripe_bytes}")
        if self.streams < 1:
            raise ConfigError(f"checkpoint streams must be >= 1, got {self.streams}")

    @staticmethod
    def plan(total_bytes: int, stripe_bytes: int, streams: int) -> StripeLayout:
        """A layout using no more streams than there are chunks (no empty files; at least one
        stream so an empty state still has a data file)."""
        chunks = -(-total_bytes // stripe_bytes) if stripe_bytes > 0 else 0
        return StripeLayout(total_bytes, stripe_bytes, max(1, min(streams, chunks)))

    @property
    def n_chunks(self) -> int:
        return -(-self.total_bytes // self.stripe_bytes)

    def chunks(self, stream: int) -> list[tuple[int, int]]:
        """``(offset, length)`` in the logical stream of each chunk of file `stream`, in file
        order."""
        if not 0 <= stream < self.streams:
            raise ConfigError(f"stream {stream} outside 0..{self.streams - 1}")
        out = []
        for j in range(stream, self.n_chunks, self.streams):
            start = j * self.stripe_bytes
            out.append((start, min(self.stripe_bytes, self.total_bytes - start)))
        return out

    def file_size(self, stream: int) -> int:
        return sum(length for _, length in self.chunks(stream))

    def to_json(self) -> dict[str, int]:
        return {"total_bytes": self.total_bytes, "stripe_bytes": self.stripe_bytes,
                "streams": self.streams}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> StripeLayout:
        try:
            values = [data["total_bytes"], data["stripe_bytes"], data["streams"]]
        except (KeyError, TypeError):
            raise CheckpointError("bad tensor layout: missing stripe fields") from None
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise CheckpointError("bad tensor layout: stripe fields must be integers")
        try:
            return StripeLayout(values[0], values[1], values[2])
        except ConfigError as exc:
            raise CheckpointError(f"bad tensor layout: {exc}") from None
