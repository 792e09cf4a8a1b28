"""A training state laid out in one snapshot slot payload, and rebuilt from it bit for bit.

The state (nested dicts/lists/tuples of tensors and small picklable objects, e.g.
``{"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 41}``) is split as
the checkpoint engine splits it (`trainguard.ckpt.tensors.capture`): a small pickled skeleton
whose tensors are references, plus the raw storages they view (tied weights and views stay
shared, strides and offsets are kept). Payload layout::

    b"TGSTATE1" | u64 table length | u64 skeleton length | table (JSON) | skeleton | pad
    storage 0 (at a 4096-aligned offset) | storage 1 | ...

The table lists each storage's ``offset``, ``nbytes`` and ``device``. Storages are copied byte
for byte through ``torch.frombuffer`` views of the slot (a CUDA storage is copied to the host
by ``copy_``); restoring copies them into memory of their own unless ``copy=False``.

    >>> import torch
    >>> plan = plan_state({"w": torch.arange(3.0), "step": 7})
    >>> buf = bytearray(plan.payload_bytes)
    >>> write_state(plan, memoryview(buf))
    >>> load_state(memoryview(buf))
    {'w': tensor([0., 1., 2.]), 'step': 7}

torch is imported only when these are called.
"""

from __future__ import annotations

import json
import struct
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from trainguard.ckpt.tensors import Captured, capture, import_torch, rebuild
from trainguard.errors import CheckpointError, SnapshotError

__all__ = ["MAX_OBJECT_BYTES", "StatePlan", "load_state", "plan_state", "write_state"]

MAGIC = b"TGSTATE1"
_PREFIX = struct.Struct("<8sQQ")
ALIGN = 4096
MAX_OBJECT_BYTES = 64 << 20
"""Non-tensor objects pickled larger than this are refused (they belong in tensors)."""
_PIECE = 64 << 20
"""Copies are split into pieces of this size (spread over the copy threads)."""


@dataclass(frozen=True, slots=True)
class StatePlan:
    """Where each part of a captured state goes in a slot payload."""

    captured: Captured
    table: bytes
    offsets: tuple[int, ...]
    payload_bytes: int

    @property
    def tensor_bytes(self) -> int:
        return self.captured.nbytes


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _key_paths(obj: Any, path: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """Every leaf of the builtin containers in `obj`, with its key path."""
    if id(obj) in seen:
        return
    if isinstance(obj, dict):
        seen.add(id(obj))
        for key, value in obj.items():
            yield from _key_paths(value, f"{path}[{key!r}]", seen)
    elif isinstance(obj, list | tuple):
        seen.add(id(obj))
        for i, value in enumerate(obj):
            yield from _key_paths(value, f"{path}[{i}]", seen)
    else:
        yield path, obj


def _culprit(state: Any, failure: CheckpointError | None) -> SnapshotError:
    """The error naming the leaf that cannot be snapshotted (the first unpicklable one, else
    the largest), found by capturing the leaves one at a time (only on this error path)."""
    largest: tuple[int, str] = (-1, "state")
    for path, leaf in _key_paths(state, "state", set()):
        try:
            size = len(capture(leaf).structure)
        except CheckpointError as exc:
            reason = str(exc).removeprefix("cannot checkpoint the state: ")
            return SnapshotError(f"{path} cannot be snapshotted: {reason}")
        largest = max(largest, (size, path))
        if size > MAX_OBJECT_BYTES:
            break
    if failure is not None:
        return SnapshotError(f"state cannot be snapshotted: {failure}")
    size, path = largest
    return SnapshotError(
        f"{path} cannot be snapshotted: {size / 2**20:.1f} MiB pickled, over the "
        f"{MAX_OBJECT_BYTES >> 20} MiB limit for non-tensor objects (keep bulk data in tensors)")


def plan_state(state: Any) -> StatePlan:
    """Capture `state` and lay it out; `SnapshotError` naming the key path of an object that
    cannot be pickled or is pickled over `MAX_OBJECT_BYTES`."""
    try:
        captured = capture(state)
    except CheckpointError as exc:
        raise _culprit(state, exc) from exc
    if len(captured.structure) > MAX_OBJECT_BYTES:
        raise _culprit(state, None)
    sizes = [ref.nbytes for ref in captured.storages]
    devices = [ref.device for ref in captured.storages]
    # The offsets depend on the table's length, which holds them: size it with a bound first.
    bound = json.dumps({"offsets": [2**62] * len(sizes), "sizes": sizes, "devices": devices})
    pos = _align(_PREFIX.size + len(bound) + len(captured.structure))
    offsets = []
    for n in sizes:
        offsets.append(pos)
        pos = _align(pos + n)
    table = json.dumps({"offsets": offsets, "sizes": sizes, "devices": devices}).encode()
    return StatePlan(captured, table, tuple(offsets), max(pos, _PREFIX.size + len(bound)
                                                          + len(captured.structure)))


def _pieces(total: int) -> list[tuple[int, int]]:
    return [(s, min(total, s + _PIECE)) for s in range(0, total, _PIECE)]


def _copy(target: Any, source: Any, start: int, end: int) -> None:
    target[start:end].copy_(source[start:end])


def _run(jobs: list[Callable[[], object]], threads: int) -> None:
    """Run the copy jobs (torch's copy_ releases the GIL, so threads overlap)."""
    if threads <= 1 or len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(threads, "tg-snap-copy") as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()


def _bytes_view(torch: Any, view: memoryview) -> Any:
    with warnings.catch_warnings():  # frombuffer warns about read-only buffers: we only read
        warnings.simplefilter("ignore")
        return torch.frombuffer(view, dtype=torch.uint8)


def write_state(plan: StatePlan, payload: memoryview, threads: int = 1) -> None:
    """Copy the planned state into `payload` (at least ``plan.payload_bytes`` long)."""
    torch = import_torch("memory snapshots")
    if len(payload) < plan.payload_bytes:
        raise SnapshotError(f"snapshot payload of {len(payload)} bytes is smaller than the "
                            f"state's {plan.payload_bytes}")
    structure = plan.captured.structure
    head = _PREFIX.pack(MAGIC, len(plan.table), len(structure)) + plan.table + structure
    payload[:len(head)] = head
    jobs: list[Callable[[], object]] = []
    for ref, offset in zip(plan.captured.storages, plan.offsets, strict=True):
        if ref.nbytes == 0:
            continue
        source = torch.empty(0, dtype=torch.uint8, device=ref.storage.device)
        source.set_(ref.storage, 0, (ref.nbytes,), (1,))
        target = _bytes_view(torch, payload[offset:offset + ref.nbytes])
        for start, end in _pieces(ref.nbytes):
            jobs.append(partial(_copy, target, source, start, end))
    _run(jobs, threads)
    if any(ref.device.startswith("cuda") for ref in plan.captured.storages):
        torch.cuda.synchronize()


def _read_table(payload: memoryview) -> tuple[list[int], list[int], list[str], bytes]:
    if len(payload) < _PREFIX.size:
        raise SnapshotError("snapshot payload is too short to hold a state")
    magic, table_len, struct_len = _PREFIX.unpack_from(payload, 0)
    end = _PREFIX.size + table_len + struct_len
    if magic != MAGIC or end > len(payload):
        raise SnapshotError("snapshot payload does not hold a trainguard state")
    try:
        table = json.loads(bytes(payload[_PREFIX.size:_PREFIX.size + table_len]))
        offsets, sizes, devices = table["offsets"], table["sizes"], table["devices"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"snapshot state table is unreadable: {exc}") from exc
    for offset, n in zip(offsets, sizes, strict=True):
        if offset < end or offset + n > len(payload):
            raise SnapshotError("snapshot state table points outside the payload")
    return offsets, sizes, devices, bytes(payload[_PREFIX.size + table_len:end])


def load_state(payload: memoryview, *, map_location: Any = "cpu", copy: bool = True,
               threads: int = 1, trusted: bool = False) -> Any:
    """Rebuild the state written by `write_state`. Tensors get memory of their own (on
    `map_location`: ``"cpu"``, a device, or None for where they were), unless ``copy=False``
    (CPU only): then they view `payload`, which must stay mapped while they live. Unpickling
    is restricted as the checkpoint engine's is (`trainguard.ckpt.unpickle`) unless
    `trusted`."""
    torch = import_torch("memory snapshots")
    offsets, sizes, devices, structure = _read_table(payload)
    storages: list[Any] = []
    jobs: list[Callable[[], object]] = []
    for offset, n, saved in zip(offsets, sizes, devices, strict=True):
        device = torch.device(saved if map_location is None else map_location)
        source = _bytes_view(torch, payload[offset:offset + n]) if n else None
        if not copy:
            if device.type != "cpu":
                raise SnapshotError("copy=False restores to CPU only")
            storages.append(source.untyped_storage() if source is not None
                            else torch.empty(0, dtype=torch.uint8).untyped_storage())
            continue
        target = torch.empty(n, dtype=torch.uint8, device=device)
        storages.append(target.untyped_storage())
        for start, end in _pieces(n):
            jobs.append(partial(_copy, target, source, start, end))
    _run(jobs, threads)
    try:
        return rebuild(structure, storages, trusted=trusted)
    except SnapshotError:
        raise
    except CheckpointError as exc:
        raise SnapshotError(f"snapshot state cannot be rebuilt: {exc}") from exc

