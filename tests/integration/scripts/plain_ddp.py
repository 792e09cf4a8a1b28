"""An ordinary DDP training script, with no trainguard SDK: env:// rendezvous (gloo), a small
model, deterministic data per step, ``torch.save`` checkpoints every ``--ckpt-every`` steps
(rank 0, atomic rename), resume from the newest one, ``destroy_process_group`` at the end.

It prints ``step N loss X`` per step (progress for the supervisor) and writes the final loss to
``--loss-log``. A run that is killed and resumed ends with the same loss as one that is not,
even when it resumes from the last step's checkpoint (the checkpoint keeps the step's mean
loss, so no step is left to recompute it).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(32, 16, generator=g)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    return x, y


def newest(ckpt_dir: Path) -> Path | None:
    found = sorted(ckpt_dir.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return found[-1] if found else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--ckpt-dir", type=Path, required=True)
    ap.add_argument("--loss-log", type=Path)
    ap.add_argument("--step-time", type=float, default=0.2)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = nn.BCEWithLogitsLoss()
    start = 0
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    last = newest(args.ckpt_dir)
    if last is not None:
        state = torch.load(last, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        mean = float(state["mean_loss"])
        print(f"resumed from {last.name} at step {start}", flush=True)
    else:
        mean = float("nan")
    for step in range(start, args.steps):
        x, y = batch(step, rank, world)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        mean = avg.item() / world
        print(f"step {step + 1} loss {mean:.6f}", flush=True)
        if (step + 1) % args.ckpt_every == 0 and rank == 0:
            tmp = args.ckpt_dir / f".step-{step + 1}.pt.tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "step": step + 1, "mean_loss": mean}, tmp)
            os.replace(tmp, args.ckpt_dir / f"step-{step + 1}.pt")
        time.sleep(args.step_time)
    dist.barrier()
    if rank == 0 and args.loss_log is not None:
        args.loss_log.write_text(f"{mean:.8f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
