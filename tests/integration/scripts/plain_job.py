"""A training-like job that does NOT import trainguard: prints progress, keeps its own
checkpoint file, and can be told to fail (environment variables set by the tests)."""

import json
import os
import sys
import time

rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
if attempt == 0 and os.environ.get("PLAIN_FIRST_ATTEMPT_STEPS"):
    steps = int(os.environ["PLAIN_FIRST_ATTEMPT_STEPS"])  # a first attempt that runs long
ckpt = os.environ.get("PLAIN_CKPT")
start = 0
if ckpt and os.path.exists(ckpt):
    with open(ckpt) as f:
        start = json.load(f)["step"]
if rank == 0 and os.environ.get("PLAIN_ENV_OUT"):
    keys = [k for k in os.environ if k.startswith(("RANK", "WORLD", "LOCAL", "MASTER", "GROUP",
                                                    "NODE_RANK", "TRAINGUARD", "TORCHELASTIC"))]
    with open(os.environ["PLAIN_ENV_OUT"], "w") as f:
        json.dump({k: os.environ[k] for k in keys}, f)
fail = os.environ.get("PLAIN_FAIL", "")
for step in range(start, steps):
    print(f"rank {rank} step {step}", flush=True)
    if fail == "every_rank" and step == 2:
        raise ValueError(f"bad hyperparameter on rank {rank}")
    if fail == "xid_then_exit" and rank == 1 and attempt == 0 and step == 6:
        # The GPU falls off the bus and the rank on it dies of it in the same instant.
        from datetime import UTC, datetime
        with open(os.environ["PLAIN_XID_LOG"], "a") as f:
            f.write(f"{datetime.now(UTC).isoformat()} node2 kernel: NVRM: Xid "
                    f"(PCI:0000:3b:00): 79, pid={os.getpid()}, name=python, GPU has fallen off "
                    "the bus.\n")
        os.write(2, b"RuntimeError: CUDA error: unspecified launch failure\n")
        os._exit(1)
    time.sleep(float(os.environ.get("PLAIN_SLEEP", "0.1")))
    if rank == 0 and ckpt and step % 5 == 4:
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step + 1}, f)
        os.replace(ckpt + ".tmp", ckpt)
print(f"rank {rank} done", flush=True)
