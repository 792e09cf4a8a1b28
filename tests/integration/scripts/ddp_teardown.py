"""A plain DDP job over gloo that does NOT import trainguard: its own torch.save checkpoints,
``dist.destroy_process_group()`` at the end, and failure modes the tests pick with DDP_MODE:

- ``abort_after_result``: rank 1 prints the final result, then aborts the way a C++ library
  does ("terminate called without an active exception", SIGABRT) before tearing down;
- ``abort_in_teardown``: rank 1 aborts inside interpreter teardown (an atexit hook that runs
  after ``destroy_process_group``), as a library's static destructor does;
- ``kill_mid``: on the first attempt rank 1 is SIGKILLed mid-training (by itself, like the OOM
  killer would);
- ``enospc_raise``: rank 0's checkpoint save fails with ENOSPC (as a full disk reports it);
- anything else (or unset): a clean run. DDP_CKPT is the checkpoint directory.
"""

import atexit
import errno
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

MODE = os.environ.get("DDP_MODE", "")
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
CKPT = os.environ["DDP_CKPT"]
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def abort() -> None:
    sys.stdout.flush()
    os.write(2, b"terminate called without an active exception\n")
    signal.raise_signal(signal.SIGABRT)


def save(model: torch.nn.Module, step: int) -> None:
    path = os.path.join(CKPT, "ckpt.pt")
    if MODE == "enospc_raise":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    torch.save({"step": step, "model": model.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    start = 0
    path = os.path.join(CKPT, "ckpt.pt")
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        start = state["step"]
        print(f"rank {rank} resumed at step {start}", flush=True)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss = torch.zeros(())
    for step in range(start, STEPS):
        if MODE == "kill_mid" and rank == 1 and attempt == 0 and step == STEPS // 2:
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(8, 64)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        if rank == 0 and step % 4 == 3:
            save(model, step + 1)
        dist.barrier()
        time.sleep(0.05)
    print(f"rank {rank} final loss {loss.item():.4f}", flush=True)
    if MODE == "abort_after_result" and rank == 1:
        abort()
    if MODE == "abort_in_teardown" and rank == 1:
        atexit.register(abort)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
