"""Produce real PyTorch flight-recorder dumps from gloo ranks on this machine.

    python tests/data/flight/make_dumps.py [--out DIR] [--case healthy|hang|mismatch|all]

Each case starts its ranks as subprocesses on 127.0.0.1 with ``TORCH_FR_BUFFER_SIZE=2000``, runs a
few collectives over gloo and has every rank write what its flight recorder holds with
``torch._C._distributed_c10d._dump_fr_trace()`` (pickle, the on-timeout format) into
``DIR/<case>/nccl_trace_rank_<rank>`` (PyTorch's default file name), and for ``healthy`` and
``hang`` also ``_dump_fr_trace_json()`` into ``DIR/<case>_json/nccl_trace_rank_<rank>.json``.
Gloo has no dump-on-timeout, so the stuck ranks dump from a timer thread while their main thread
waits in the collective, the moment an operator would take the dump.

- ``healthy``: 2 ranks, all collectives complete;
- ``hang``: 3 ranks; ranks 0 and 1 enter the 6th collective of the default group (an all_reduce),
  rank 2 never does; all three dump while 0 and 1 wait in it;
- ``mismatch``: 2 ranks; at the 3rd collective rank 0 calls broadcast while rank 1 calls
  all_reduce; both dump while stuck.

Every process the script starts is waited for with a deadline and killed by its PID past it.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PREFIX = "nccl_trace_rank_"
WORLD_SIZES = {"healthy": 2, "hang": 3, "mismatch": 2}
JSON_CASES = ("healthy", "hang")
DUMP_AFTER_S = 1.0
"""How long a stuck rank waits in its collective before it dumps."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(path: Path, data: bytes) -> None:
    # Write then rename, so a rank polling for another's file never reads half of it.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _dump(out: Path, case: str, rank: int) -> None:
    import torch._C._distributed_c10d as c10d

    _write(out / case / f"{PREFIX}{rank}", c10d._dump_fr_trace())
    if case in JSON_CASES:
        _write(out / f"{case}_json" / f"{PREFIX}{rank}.json", c10d._dump_fr_trace_json())


def _wait_for(paths: list[Path], deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while not all(p.exists() for p in paths):
        if time.monotonic() > end:
            raise SystemExit(f"gave up waiting for {paths}")
        time.sleep(0.05)


def _dump_later_then_exit(out: Path, case: str, rank: int, world: int) -> None:
    """From a side thread: dump after DUMP_AFTER_S, wait until every rank has dumped, end the
    process. Its main thread may be stuck in a collective that will never complete; a rank whose
    call did return stays alive until then, so its peers keep waiting rather than fail on a closed
    connection before they dump."""

    def run() -> None:
        time.sleep(DUMP_AFTER_S)
        _dump(out, case, rank)
        _wait_for([out / case / f"{PREFIX}{r}" for r in range(world)], 30.0)
        os._exit(0)

    threading.Thread(target=run, daemon=True).start()


def _until_exit(call: Any, *args: Any, **kwargs: Any) -> None:
    """Make a call that never completes normally. When the peer that dumped last exits first,
    the call fails with "connection closed by peer": that must not end this process (rc 1)
    before its dump thread has ended it with 0."""
    try:
        call(*args, **kwargs)
    except RuntimeError:
        threading.Event().wait()


def rank_main(case: str, rank: int, world: int, out: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=30))
    x = torch.arange(4, dtype=torch.float32)
    if case == "healthy":
        dp = dist.new_group([0, 1], group_desc="dp")
        dist.all_reduce(x)                                           # world seq 1
        dist.all_reduce(x, group=dp)                                 # dp seq 1
        out_l = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(out_l, torch.full((3,), rank, dtype=torch.int64))  # world seq 2
        dist.broadcast(torch.ones(2, 3, dtype=torch.bfloat16), src=0)      # world seq 3
        if rank == 0:                                                # p2p: gloo records none
            dist.send(x, dst=1)
        else:
            dist.recv(x, src=0)
        dist.all_reduce(x, async_op=True).wait()                     # world seq 4
        dist.barrier()                                               # world seq 5
        _dump(out, case, rank)
    elif case == "hang":
        pair = dist.new_group([0, 1], group_desc="pair")
        for _ in range(3):
            dist.all_reduce(x)                                       # world seq 1-3
        if rank < 2:
            dist.all_reduce(x, group=pair)                           # pair seq 1
        dist.all_gather([torch.zeros(4) for _ in range(world)], x)   # world seq 4
        dist.broadcast(x, src=0)                                     # world seq 5
        _dump_later_then_exit(out, case, rank, world)
        if rank < 2:
            _until_exit(dist.all_reduce, x)                          # world seq 6: rank 2 absent
        # Rank 2 "hangs elsewhere" (say, in its data loader) and never enters world seq 6.
        threading.Event().wait()
    elif case == "mismatch":
        dist.all_reduce(x)                                           # seq 1
        dist.all_reduce(x)                                           # seq 2
        _dump_later_then_exit(out, case, rank, world)
        if rank == 0:
            _until_exit(dist.broadcast, x, src=0)                    # seq 3: broadcast ...
        else:
            _until_exit(dist.all_reduce, x)                          # ... against all_reduce
        threading.Event().wait()
    else:
        raise SystemExit(f"unknown case {case}")
    os._exit(0)  # skip destroy_process_group: a peer may already be gone


def run_case(case: str, out: Path, timeout_s: float) -> None:
    world = WORLD_SIZES[case]
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()))
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world",
                               str(world), "--case", case, "--out", str(out)], env=env)
             for r in range(world)]
    deadline = time.monotonic() + timeout_s
    failed: list[str] = []
    for rank, proc in enumerate(procs):
        try:
            rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        if rc != 0:
            failed.append(f"rank {rank} (pid {proc.pid}): rc={rc}")
    if failed:
        raise SystemExit(f"case {case} failed: " + "; ".join(failed))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--case", default="all", choices=[*WORLD_SIZES, "all"])
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        rank_main(args.case, args.rank, args.world, args.out)
        return
    for case in WORLD_SIZES if args.case == "all" else [args.case]:
        run_case(case, args.out, args.timeout_s)


if __name__ == "__main__":
    main()
