"""PyTorch save/load through `Checkpoints` (torch is imported only when these are called)."""

from __future__ import annotations

from types import ModuleType
from typing import Any, BinaryIO

from trainguard.ckpt import CheckpointInfo, SavedCheckpoint
from trainguard.errors import ConfigError
from trainguard.train.checkpoints import Checkpoints

__all__ = ["load_torch", "save_torch"]


def _torch(what: str) -> ModuleType:
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(
            f"trainguard.train.{what} needs PyTorch: pip install 'trainguard[torch]'"
        ) from exc
    return torch


def save_torch(ckpts: Checkpoints, step: int, obj: Any, name: str = "state.pt") -> SavedCheckpoint:
    """``torch.save(obj)`` as file `name` of an atomic checkpoint for `step`.

        tg.save_torch(ckpts, step + 1, {"model": model.state_dict(), "step": step + 1})
    """
    torch = _torch("save_torch")

    def write(f: BinaryIO) -> None:
        torch.save(obj, f)

    return ckpts.save(step, {name: write})


def load_torch(
    ckpts: Checkpoints, name: str = "state.pt", map_location: Any = "cpu"
) -> tuple[Any, int]:
    """``(obj, step)`` from the newest valid checkpoint, or ``(None, 0)`` when there is none.

    A checkpoint whose hashes pass but that ``torch.load`` cannot read is skipped too (recorded
    in the ``resume`` record) and the previous one is tried; `CheckpointError` when intact
    checkpoints exist but none loads. Uses ``weights_only=False``: load only checkpoints
    you wrote.
    """
    torch = _torch("load_torch")

    def load(info: CheckpointInfo) -> Any:
        return torch.load(info.file(name), map_location=map_location, weights_only=False)

    found = ckpts.load(load)
    if found is None:
        return None, 0
    obj, info = found
    return obj, info.step
