"""An ordinary training script that logs on rank 0 only, without the trainguard SDK.

Every rank prints one start-up line (the warnings real scripts print), then only rank 0 logs,
once per step. DDP over gloo (``--plain``: no torch at all, the ranks just sleep per step).
Faults, for the hang tests:

- ``--stop-rank R --stop-at S``: rank R stops itself (SIGSTOP) at step S (``-1``: before its
  start-up line and before the rendezvous);
- ``--stall-rank R --stall-at S``: rank R sleeps forever at step S, outside any collective, so
  the others wait in the step's all-reduce.

``--mark FILE``: the faulty rank writes the wall time of its fault there first. Faults fire in
the first attempt only (``TORCHELASTIC_RESTART_COUNT`` 0), so a relaunch runs clean.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path


def fault(args: argparse.Namespace, rank: int, step: int) -> None:
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    for who, at, what in ((args.stop_rank, args.stop_at, "stop"),
                          (args.stall_rank, args.stall_at, "stall")):
        if who == rank and at == step:
            if args.mark is not None:
                args.mark.write_text(f"{time.time()}\n")
            if what == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                while True:
                    time.sleep(3600)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--plain", action="store_true", help="no torch: sleep per step")
    ap.add_argument("--stop-rank", type=int)
    ap.add_argument("--stop-at", type=int, default=0)
    ap.add_argument("--stall-rank", type=int)
    ap.add_argument("--stall-at", type=int, default=0)
    ap.add_argument("--mark", type=Path)
    ap.add_argument("--ckpt-dir", type=Path, help="accepted for plain_ddp.py's callers; unused")
    ap.add_argument("--loss-log", type=Path, help="rank 0 writes the final loss there")
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    fault(args, rank, -1)
    print(f"rank {rank}: UserWarning: something every rank prints at start-up", flush=True)
    if args.plain:
        for step in range(args.steps):
            fault(args, rank, step)
            time.sleep(args.step_time)
            if rank == 0:
                print(f"step {step + 1}", flush=True)
        return
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(args.steps):
        fault(args, rank, step)
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(32, 16, generator=g)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        if rank == 0:
            print(f"step {step + 1} loss {avg.item() / world:.6f}", flush=True)
        time.sleep(args.step_time)
    if rank == 0 and args.loss_log is not None:
        args.loss_log.write_text(f"{avg.item() / world:.8f}\n")
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
