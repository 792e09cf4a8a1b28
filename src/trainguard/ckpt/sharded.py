"""Sharded checkpoints: every rank of a ``torch.distributed`` group writes its own state into one
checkpoint directory; rank 0 writes the one manifest.

Saving, without collectives in background threads (they would race training's own):

1. In `Checkpointer.save` (every rank, foreground) rank 0 picks the temp-dir tag and broadcasts
   it, so all ranks write into the same ``.tmp-step-XXXXXXXX-<pid>-<hex>/``.
2. Each rank writes and fsyncs its files, then publishes ``rank0000r.done.json`` (its files'
   sizes and checksums; written to a temp name and renamed, so it appears complete) or
   ``rank0000r.failed`` with the error.
3. Rank 0 waits for every rank's marker (polling the shared directory, up to
   ``commit_timeout_s``), merges the entries into one manifest and commits (atomic rename). A
   failed or missing rank aborts the save and names the rank.

Loading (`load_agreed`): the ranks must resume from the same step, so for each candidate (rank
0's list, broadcast) every rank loads and verifies its own shard and the ranks exchange the
outcome; the newest step that loaded on every rank wins.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard.ckpt.atomic import (
    CheckpointDir,
    CheckpointInfo,
    SavedCheckpoint,
    SkippedCheckpoint,
    StagedCheckpoint,
)
from trainguard.ckpt.jsonread import parse_json
from trainguard.ckpt.manifest import FileEntry
from trainguard.ckpt.tensors import import_torch
from trainguard.errors import CheckpointError

__all__ = ["agree_tag", "finish_shard", "load_agreed", "mark_failed", "rank_world"]

_POLL_S = 0.05


def _dist() -> Any:
    torch = import_torch("sharded checkpoints")
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        raise CheckpointError(
            "sharded=True needs an initialized torch.distributed process group "
            "(init_process_group before saving or loading)")
    return dist


def rank_world(group: Any = None) -> tuple[int, int]:
    """This process's rank and the group's size."""
    dist = _dist()
    return int(dist.get_rank(group)), int(dist.get_world_size(group))


def _broadcast(value: Any, group: Any) -> Any:
    dist = _dist()
    src = 0 if group is None else int(dist.get_global_rank(group, 0))
    box = [value]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def agree_tag(tag: str, group: Any = None) -> str:
    """Rank 0's temp-dir tag, on every rank."""
    return str(_broadcast(tag, group))


def _done_name(rank: int) -> str:
    return f"rank{rank:05d}.done.json"


def _failed_name(rank: int) -> str:
    return f"rank{rank:05d}.failed"


def mark_failed(staged: StagedCheckpoint, rank: int, error: BaseException) -> None:
    """Tell rank 0 this rank's part of the save failed (best effort)."""
    with contextlib.suppress(OSError):
        (staged.tmp / _failed_name(rank)).write_text(f"{type(error).__name__}: {error}\n")


def _publish(staged: StagedCheckpoint, rank: int, entries: dict[str, FileEntry]) -> None:
    data = json.dumps({name: e.to_json() for name, e in entries.items()})
    tmp = staged.tmp / f".{_done_name(rank)}.part"
    with tmp.open("w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, staged.tmp / _done_name(rank))


def _collect(staged: StagedCheckpoint, world: int, timeout_s: float) -> dict[str, FileEntry]:
    """Every rank's entries, once all have published; `CheckpointError` naming a failed or
    missing rank."""
    from trainguard.ckpt.manifest import Manifest

    deadline = time.monotonic() + timeout_s
    waiting = set(range(world))
    merged: dict[str, FileEntry] = {}
    while waiting:
        for rank in sorted(waiting):
            failed = staged.tmp / _failed_name(rank)
            if failed.exists():
                reason = failed.read_text(errors="replace").strip()
                raise CheckpointError(
                    f"checkpoint step {staged.step}: rank {rank} failed to write its shard: "
                    f"{reason}")
            done = staged.tmp / _done_name(rank)
            if done.exists():
                files = parse_json(done.read_bytes(), done.name)
                parsed = Manifest.from_json(json.dumps({
                    "format": "trainguard-checkpoint/1", "step": staged.step, "created": 0,
                    "files": files}))
                merged.update(parsed.files)
                done.unlink()
                waiting.discard(rank)
        if waiting:
            if time.monotonic() > deadline:
                raise CheckpointError(
                    f"checkpoint step {staged.step}: rank(s) {sorted(waiting)} did not finish "
                    f"writing within {timeout_s:.0f} s")
            time.sleep(_POLL_S)
    return merged


def finish_shard(ckpt_dir: CheckpointDir, staged: StagedCheckpoint, rank: int, world: int,
                 entries: dict[str, FileEntry], meta: dict[str, Any], started: float, *,
                 commit_timeout_s: float) -> SavedCheckpoint:
    """Publish this rank's files; rank 0 also collects everyone's (waiting up to
    `commit_timeout_s`) and commits in `ckpt_dir`. Other ranks return when their own shard is
    durable (``size_bytes`` is their shard's)."""
    _publish(staged, rank, entries)
    if rank != 0:
        return SavedCheckpoint(step=staged.step, path=staged.final,
                               size_bytes=sum(e.size for e in entries.values()),
                               save_s=time.monotonic() - started)
    try:
        merged = _collect(staged, world, commit_timeout_s)
    except BaseException:
        ckpt_dir.abort(staged)
        raise
    return ckpt_dir.commit(staged, merged, meta=meta, started=started)


def load_agreed(ckpt_dir: CheckpointDir, group: Any, load: Callable[[CheckpointInfo, int], Any],
                *, max_step: int | None
                ) -> tuple[Any, CheckpointInfo | None, tuple[SkippedCheckpoint, ...]]:
    """The newest checkpoint in `ckpt_dir` whose shard loads on every rank of `group` (see the
    module docstring); ``load(info, rank)`` loads and verifies this rank's shard or raises
    `CheckpointError`."""
    dist = _dist()
    rank, world = rank_world(group)
    infos = [info for info in ckpt_dir.list() if max_step is None or info.step <= max_step]
    steps = _broadcast([info.step for info in infos] if rank == 0 else None, group)
    by_step = {info.step: info for info in infos}
    skipped: list[SkippedCheckpoint] = []
    for step in reversed(steps):
        info = by_step.get(step)
        state: Any = None
        reason: str | None
        if info is None:
            reason = f"rank {rank} does not see step {step}"
        else:
            try:
                state = load(info, rank)
                reason = None
            except CheckpointError as exc:
                reason = str(exc)
        reasons: list[Any] = [None] * world
        dist.all_gather_object(reasons, reason, group=group)
        bad = [(r, why) for r, why in enumerate(reasons) if why is not None]
        if not bad:
            assert info is not None  # every rank loaded it
            ckpt_dir.ledger.note(info.path, None)
            return state, info, tuple(skipped)
        why = "; ".join(f"rank {r}: {w}" for r, w in bad)
        if info is not None:
            ckpt_dir.ledger.note(info.path, why)  # rank 0 prunes: never this one
        path = info.path if info is not None else Path(ckpt_dir.root) / f"step-{step:08d}"
        skipped.append(SkippedCheckpoint(step, path, why))
    return None, None, tuple(skipped)
