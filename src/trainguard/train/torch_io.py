"""PyTorch save/load through `Checkpoints` (torch is imported only when these are called).

By default a state goes through the fast tensor engine (striped parallel files, checksummed,
see `trainguard.ckpt.engine`). Passing ``name=`` writes / reads a single ``torch.save`` file of
that name instead, for tools that expect one. Loads are restricted to tensors, containers,
scalars and arrays (the engine's own restriction, ``torch.load(weights_only=True)`` for
``torch.save`` files) unless ``trusted=True``.
"""

from __future__ import annotations

import pickle
import re
from types import ModuleType
from typing import Any, BinaryIO

from trainguard.ckpt import CheckpointInfo, SavedCheckpoint
from trainguard.errors import CheckpointError, ConfigError
from trainguard.train.checkpoints import Checkpoints

__all__ = ["load_torch", "save_torch"]

LEGACY_NAME = "state.pt"
"""The ``torch.save`` file of checkpoints written with ``name=`` (and by trainguard < 0.7)."""


def _torch(what: str) -> ModuleType:
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(
            f"trainguard.train.{what} needs PyTorch: pip install 'trainguard[torch]'"
        ) from exc
    return torch


def save_torch(
    ckpts: Checkpoints, step: int, obj: Any, name: str | None = None
) -> SavedCheckpoint:
    """Save `obj` (a state dict or any picklable object holding tensors) as checkpoint `step`
    and return once it is durable:

        tg.save_torch(ckpts, step + 1, {"model": model.state_dict(), "step": step + 1})

    To keep training while it is written, use ``ckpts.save_state(step, obj)`` (returns after
    the snapshot) and ``ckpts.wait()`` before exiting. With `name`, writes one ``torch.save``
    file of that name instead of the engine's striped files.
    """
    torch = _torch("save_torch")
    if name is None:
        return ckpts.save_state(step, obj).wait()

    def write(f: BinaryIO) -> None:
        torch.save(obj, f)

    return ckpts.save(step, {name: write})


def load_torch(
    ckpts: Checkpoints, name: str | None = None, map_location: Any = "cpu", *,
    trusted: bool = False, allow_fresh_start: bool = False,
) -> tuple[Any, int]:
    """``(obj, step)`` from the newest valid checkpoint, or ``(None, 0)`` when there is none.

    Reads engine checkpoints and ``torch.save`` files (`name`, default ``state.pt``) alike. A
    checkpoint that fails its checks, or whose hashes pass but cannot be read, is skipped
    (recorded in the ``resume`` record) and the previous one is tried. `CheckpointError`
    when intact checkpoints exist but none loads, and when checkpoints exist but none could be
    read (newer format, damaged, a refused global) unless `allow_fresh_start`: then training
    starts at step 0 and they are kept.

    Restricted unpickling (tensors, containers, scalars, arrays; ``weights_only=True`` for
    ``torch.save`` files) unless `trusted`: a checkpoint holding other objects is refused
    with the global named. Pass ``trusted=True`` only for checkpoints you trust: unpickling
    them can run arbitrary code.

    When TRAINGUARD_RESTORE is set (the supervisor chose a memory snapshot), the state comes
    from that slot (`Checkpoints.restore_memory`); `SnapshotError` when it does not verify.
    """
    torch = _torch("load_torch")
    memory = ckpts.restore_memory(map_location=map_location, trusted=trusted)
    if memory is not None:
        return memory[0], memory[1].step
    legacy = name or LEGACY_NAME

    def load(info: CheckpointInfo) -> Any:
        if name is None and ckpts.is_tensor_checkpoint(info):
            return ckpts.engine.load(info, map_location=map_location, trusted=trusted)
        reason = ckpts.validate(info)
        if reason is not None:
            raise CheckpointError(reason)
        try:
            return torch.load(info.file(legacy), map_location=map_location,
                              weights_only=not trusted)
        except CheckpointError:
            raise
        except pickle.UnpicklingError as exc:
            refused = None if trusted else _refused_global(exc)
            if refused is None:
                raise _LoadFailed(f"{type(exc).__name__}: {exc}") from exc
            raise CheckpointError(
                f"{legacy} needs the global {refused!r:.120}, which a restricted load "
                "(torch.load weights_only=True) refuses; pass trusted=True to load it if you "
                "trust where this checkpoint comes from") from exc
        except Exception as exc:  # not a torch file: a loader failure, not damage
            raise _LoadFailed(f"{type(exc).__name__}: {exc}") from exc

    found = ckpts.load(load, validate=False, allow_fresh_start=allow_fresh_start)
    if found is None:
        return None, 0
    obj, info = found
    return obj, info.step


def _refused_global(exc: BaseException) -> str | None:
    """The global a ``weights_only=True`` load refused, from torch's message (None: the load
    failed for another reason)."""
    match = re.search(r"GLOBAL ([\w.]+)", str(exc))
    return match.group(1) if match else None


class _LoadFailed(RuntimeError):
    """``torch.load`` failed on a checkpoint whose hashes pass."""
