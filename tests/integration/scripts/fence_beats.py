"""A job whose ranks do not talk to each other, so a rank of a lost host runs on by itself
(the worst case for fencing): every step each rank appends ``<unix time> <attempt> <rank>
<node>`` to its own beat file in the shared directory, and every 5 steps saves a checkpoint
through the trainguard SDK into its own rank's directory there (resumed from on relaunch).

It prints ``step N loss X`` per step and, on rank 0, writes ``0.0`` to ``--loss-log`` at the end.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from trainguard.train import Checkpoints


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--ckpt-dir", type=Path, required=True)
    ap.add_argument("--loss-log", type=Path)
    ap.add_argument("--step-time", type=float, default=0.2)
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    attempt = os.environ.get("TRAINGUARD_ATTEMPT", "0")
    node = os.environ.get("TRAINGUARD_NODE", "?")
    beats = args.ckpt_dir / "beats"
    beats.mkdir(parents=True, exist_ok=True)
    ckpts = Checkpoints(args.ckpt_dir / f"rank{rank}", keep_last=2)
    latest = ckpts.latest()
    start = latest.step if latest is not None else 0
    if latest is not None:
        print(f"resumed from step {start}", flush=True)
    with open(beats / f"{node}-a{attempt}-r{rank}.log", "a") as out:
        for step in range(start, args.steps):
            out.write(f"{time.time():.3f} {attempt} {rank} {node}\n")
            out.flush()
            print(f"step {step + 1} loss 0.5", flush=True)
            if (step + 1) % 5 == 0:
                ckpts.save_bytes(step + 1, {"state": f"{step + 1}".encode()})
            time.sleep(args.step_time)
    if rank == 0 and args.loss_log is not None:
        args.loss_log.write_text("0.0\n")


if __name__ == "__main__":
    main()
