"""One rank of a sharded-checkpoint test job (gloo on CPU; rank from RANK/WORLD_SIZE).

    save ROOT STEP...   each rank saves a state of its own (seeded by rank and step) at each STEP
    load ROOT           each rank loads the newest checkpoint every rank can load; prints JSON
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from trainguard.ckpt.engine import Checkpointer


def state(rank: int, step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return {"shard": torch.randn(40_000 + 1000 * rank, generator=g),
            "small": torch.arange(rank + 3), "rank": rank, "step": step}


def main() -> None:
    mode, root = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    ck = Checkpointer(root, sharded=True, streams=2, stripe_bytes=16384, keep_last=5)
    if mode == "save":
        for step in map(int, sys.argv[3:]):
            ck.save(step, state(rank, step))
        saved = ck.wait(60)
        print(json.dumps({"rank": rank, "saved": [s.step for s in saved]}), flush=True)
    else:
        loaded, info, skipped = ck.load_latest()
        ok = loaded is not None and info is not None and all(
            torch.equal(loaded[k], state(rank, info.step)[k]) for k in ("shard", "small"))
        print(json.dumps({"rank": rank, "step": None if info is None else info.step,
                          "equal": ok, "skipped": [[s.step, s.reason] for s in skipped]}),
              flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # skip gloo teardown (see examples/train_gpt.py)


if __name__ == "__main__":
    main()
