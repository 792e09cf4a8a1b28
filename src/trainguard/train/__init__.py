"""The training-side SDK: import it in a training script that ``trainguard run`` supervises.

    import trainguard.train as tg

    tg.init()                                   # no-op reporting outside the supervisor
    with tg.phase("dist_init"):
        dist.init_process_group("gloo")
    ckpts = tg.Checkpoints("ckpt/", keep_last=3)
    with tg.phase("ckpt_load"):
        state, start_step = tg.load_torch(ckpts)  # (None, 0) when nothing valid
    for step in range(start_step, total):
        with tg.span("forward"):                # also data, backward, optimizer, checkpoint
            loss = ...
        tg.step(step, loss=float(loss))         # heartbeat; raises NonFiniteLossError on NaN/inf
        if rank == 0 and (step + 1) % 10 == 0:
            tg.save_torch(ckpts, step + 1, state_dict)
    tg.finish()

Importing this package loads only the standard library (torch is imported by `save_torch` /
`load_torch` when called), so it adds nothing to a training script's startup.
"""

from __future__ import annotations

from trainguard.ckpt import CheckpointInfo, SavedCheckpoint, SkippedCheckpoint
from trainguard.train.api import (
    finish,
    init,
    is_supervised,
    phase,
    rank,
    span,
    step,
    world_size,
)
from trainguard.train.checkpoints import Checkpoints
from trainguard.train.env import TrainEnv
from trainguard.train.session import NonFiniteLossError, Session
from trainguard.train.torch_io import load_torch, save_torch

__all__ = [
    "CheckpointInfo",
    "Checkpoints",
    "NonFiniteLossError",
    "SavedCheckpoint",
    "Session",
    "SkippedCheckpoint",
    "TrainEnv",
    "finish",
    "init",
    "is_supervised",
    "load_torch",
    "phase",
    "rank",
    "save_torch",
    "span",
    "step",
    "world_size",
]
