"""Generate a large mixed GPU-cluster log: mostly benign lines, ~0.1% failure evidence.

Benign lines imitate what fills real logs: training step lines with rank prefixes, NCCL INFO
setup chatter, syslog kernel/systemd lines, Python logging INFO/WARNING. Failure lines are drawn
from realistic examples of many signatures (XIDs, NCCL timeouts, OOMs, storage, Slurm...).
"""

from __future__ import annotations

import random
from pathlib import Path

FAILURE_LINES = [
    "Nov 21 10:00:01 node{n} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.",
    "Nov 21 10:00:01 node{n} kernel: NVRM: Xid (PCI:0000:5d:00): 48, pid=2231, name=python3, "
    "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
    "[rank{n}]:[E1121 10:10:02.123456 1234 ProcessGroupNCCL.cpp:616] [Rank {n}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,"
    " Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
    "[rank{n}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {g} "
    "has a total capacity of 79.11 GiB of which 1.02 GiB is free.",
    "Nov 21 10:00:05 node{n} kernel: Out of memory: Killed process 41{n} (python3) "
    "total-vm:812341kB, anon-rss:7812312kB",
    "node{n}:1234:1240 [{g}] NCCL WARN NET/IB : Got completion from peer 10.0.0.{n}<59343> with "
    "status=12 opcode=0 len=0 vendor err 129 (Recv)",
    "Nov 21 10:00:07 node{n} kernel: nfs: server storage01 not responding, still trying",
    "slurmstepd: error: *** JOB 4711 ON node{n} CANCELLED AT 2026-11-21T10:00:00 DUE TO NODE "
    "FAILURE ***",
    "[rank{n}]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "[rank{n}]: OSError: [Errno 28] No space left on device",
    "2026-11-21 10:00:00,123 INFO step 1200 loss nan lr 3e-4",
    "[rank{n}]: ValueError: Expected input batch_size (32) to match target batch_size (64).",
]

BENIGN = [
    "[rank{n}]: 2026-11-21 10:{m:02d}:{s:02d},{ms:03d} INFO train.py:211 step {step} | loss "
    "{loss:.4f} | lr 2.4e-4 | tokens/s {tps} | grad_norm 0.{gn}",
    "node{n}:{pid}:{tid} [{g}] NCCL INFO Channel {c:02d}/0 : {a}[{g}] -> {b}[{g}] via P2P/CUMEM",
    "Nov 21 10:{m:02d}:{s:02d} node{n} systemd[1]: Started Session {step} of user slurm.",
    "Nov 21 10:{m:02d}:{s:02d} node{n} kernel: [{up}.{ms:06d}] mlx5_core 0000:0c:00.0: "
    "mlx5_fw_tracer: FW tracer event",
    "2026-11-21 10:{m:02d}:{s:02d},{ms:03d} - INFO - data.py:88 - loaded shard {step} "
    "({tps} samples) from /lustre/datasets/web/part-{c:05d}.arrow",
    "[rank{n}]: 2026-11-21 10:{m:02d}:{s:02d},{ms:03d} INFO checkpoint.py:140 saved "
    "step {step} to /checkpoints/run7/step_{step}",
    "Nov 21 10:{m:02d}:{s:02d} node{n} dcgm-exporter[2211]: level=info msg=\"Collecting "
    "metrics\" counters={c}",
]


def _pool(rng: random.Random, lines: int, match_rate: float) -> list[str]:
    pool = []
    for _ in range(lines):
        n, g = rng.randint(1, 64), rng.randint(0, 7)
        if rng.random() < match_rate:
            pool.append(rng.choice(FAILURE_LINES).format(n=n, g=g))
        else:
            pool.append(rng.choice(BENIGN).format(
                n=n, g=g, m=rng.randint(0, 59), s=rng.randint(0, 59), ms=rng.randint(0, 999999),
                step=rng.randint(1, 99999), loss=rng.uniform(1.5, 3.5),
                tps=rng.randint(100000, 500000), gn=rng.randint(100, 999),
                pid=rng.randint(1000, 99999), tid=rng.randint(1000, 99999),
                c=rng.randint(0, 31), a=rng.randint(0, 511), b=rng.randint(0, 511),
                up=rng.randint(1000, 99999)))
    return pool


def generate(path: Path, size_bytes: int, match_rate: float = 0.001, seed: int = 7) -> Path:
    """Write ``size_bytes`` (rounded up to whole blocks) of mixed log to ``path``."""
    rng = random.Random(seed)
    blocks = [("\n".join(_pool(rng, 20000, match_rate)) + "\n").encode() for _ in range(8)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    written = 0
    with open(tmp, "wb") as f:
        i = 0
        while written < size_bytes:
            block = blocks[i % len(blocks)]
            f.write(block)
            written += len(block)
            i += 1
    tmp.rename(path)
    return path
