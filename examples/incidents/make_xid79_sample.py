"""Regenerate the bundled sample incident (``xid79-allreduce-hang/``) used by ``make demo``.

A 4-node x 8-GPU Slurm job (job 4711) trains normally; at 10:02:17 GPU 0000:b3:00.0 (local GPU 5)
on gpu-node03 falls off the bus (XID 79). Rank 21 dies with it; the other 31 ranks block in an
ALLREDUCE until the NCCL watchdog fires 10 minutes later, then torchrun tears the job down and
Slurm ends it. Benign noise is interleaved: fp16 loss-scale overflows, NCCL INFO lines, an XID 63
page retirement on another node two hours earlier, systemd chatter.

    python examples/incidents/make_xid79_sample.py
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

OUT = Path(__file__).with_name("xid79-allreduce-hang")
NODES = [f"gpu-node0{i}" for i in range(1, 5)]
FAIL_NODE, FAIL_LOCAL_GPU, FAIL_PCI = "gpu-node03", 5, "0000:b3:00"
BUS_IDS = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:b3:00",
           "0000:ba:00", "0000:db:00"]
T_FAIL = datetime(2026, 11, 14, 10, 2, 17, tzinfo=UTC)


def syslog(t: datetime, host: str, proc: str, msg: str) -> str:
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S} {host} {proc}: {msg}"


def glog(rank: int, t: datetime, level: str, src: str, msg: str) -> str:
    return f"[rank{rank}]:[{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d} 4{rank:03d} {src}] {msg}"


def kern_logs(rng: random.Random) -> None:
    for n, node in enumerate(NODES):
        lines: list[str] = []
        t = T_FAIL - timedelta(hours=3)
        boot = 86400.0 * 3 + n * 17.3
        while t < T_FAIL + timedelta(minutes=15):
            t += timedelta(seconds=rng.randint(60, 400))
            up = boot + (t - T_FAIL).total_seconds()
            lines.append(syslog(t, node, "systemd[1]", rng.choice([
                "Started Session 41 of user slurm.", "Starting Cleanup of Temporary Directories...",
                "Finished Cleanup of Temporary Directories.", "Started Daily apt download."])))
            if rng.random() < 0.2:
                lines.append(syslog(t, node, "kernel", f"[{up:.6f}] mlx5_core 0000:"
                                    f"{rng.choice(['0c', '4b', '8d'])}:00.0: mlx5_fw_tracer: "
                                    "FW tracer event"))
        if node == "gpu-node01":
            t63 = T_FAIL - timedelta(hours=2, minutes=11)
            lines.append(syslog(t63, node, "kernel", "NVRM: Xid (PCI:0000:5d:00): 63, pid=88121, "
                                "name=python3, Row Remapper: New row (0x0000000000a8f3b1) marked "
                                "for remapping, reset gpu to activate."))
        if node == FAIL_NODE:
            up = boot
            lines += [
                syslog(T_FAIL, node, "kernel", f"[{up:.6f}] NVRM: GPU at PCI:{FAIL_PCI}: "
                       "GPU-7c1d2a4e-3f5b-2c8d-9e0a-1b2c3d4e5f60"),
                syslog(T_FAIL, node, "kernel", f"[{up:.6f}] NVRM: GPU Board Serial Number: "
                       "1654123019742"),
                syslog(T_FAIL, node, "kernel", f"[{up:.6f}] NVRM: Xid (PCI:{FAIL_PCI}): 79, "
                       "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
                syslog(T_FAIL, node, "kernel", f"[{up:.6f}] NVRM: GPU {FAIL_PCI}.0: GPU has "
                       "fallen off the bus."),
                syslog(T_FAIL, node, "kernel", f"[{up + 0.002:.6f}] NVRM: A GPU crash dump has "
                       "been created. If possible, please run"),
                syslog(T_FAIL + timedelta(seconds=1), node, "kernel", f"[{up + 1:.6f}] "
                       "pcieport 0000:b0:02.0: AER: Uncorrected (Non-Fatal) error received: "
                       "0000:b3:00.0"),
            ]
        lines.sort(key=lambda s: datetime.strptime("2026 " + s[:15], "%Y %b %d %H:%M:%S"))
        d = OUT / node
        d.mkdir(parents=True, exist_ok=True)
        (d / "kern.log").write_text("\n".join(lines) + "\n")


def rank_logs(rng: random.Random) -> None:
    t0 = T_FAIL - timedelta(minutes=42)
    fail_rank = NODES.index(FAIL_NODE) * 8 + FAIL_LOCAL_GPU
    seq = 18230
    for rank in range(32):
        node = NODES[rank // 8]
        lines: list[str] = []
        t = t0
        step = 2400
        while t < T_FAIL:
            t += timedelta(seconds=6.1 + rng.random() * 0.2)
            step += 1
            if rank == 0:
                lines.append(f"[rank0]: {t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} INFO "
                             f"train.py:211 step {step} | loss {2.9 - step * 1e-4:.4f} | lr "
                             f"2.4e-4 | tokens/s 412331 | grad_norm 0.{rng.randint(200, 400)}")
                if step % 97 == 0:
                    lines.append(f"[rank0]: {t:%Y-%m-%d %H:%M:%S},000 WARNING loss_scaler.py:88"
                                 " Gradient overflow. Skipping step, loss scaler 0 reducing loss"
                                 " scale to 32768.0")
        if rank == fail_rank:
            lines.append(f"[rank{rank}]: {T_FAIL:%Y-%m-%d %H:%M:%S},412 INFO train.py:211 "
                         "entering step")
        else:
            tw = T_FAIL + timedelta(minutes=10, seconds=rng.random() * 2)
            lines.append(glog(rank, tw, "E", "ProcessGroupNCCL.cpp:632",
                              f"[Rank {rank}] Watchdog caught collective operation timeout: "
                              f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=25165824, "
                              f"NumelOut=25165824, Timeout(ms)=600000) ran for 600{rank:03d} "
                              "milliseconds before timing out."))
            lines.append(glog(rank, tw, "E", "ProcessGroupNCCL.cpp:1664",
                              f"[PG 0 (default_pg) Rank {rank}] Exception (either an error or "
                              "timeout) detected by watchdog at work: "
                              f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL "
                              f"work: {seq - 1}."))
            lines.append(glog(rank, tw, "E", "ProcessGroupNCCL.cpp:1709",
                              f"[PG 0 (default_pg) Rank {rank}] Timeout at NCCL work: {seq}, "
                              "last enqueued NCCL work: {seq}, last completed NCCL work: "
                              f"{seq - 1}.".replace("{seq}", str(seq))))
            lines.append(glog(rank, tw, "E", "ProcessGroupNCCL.cpp:621",
                              f"[Rank {rank}] Some NCCL operations have failed or timed out. Due"
                              " to the asynchronous nature of CUDA kernels, subsequent GPU "
                              "operations might run on corrupted/incomplete data."))
            lines.append(f"[rank{rank}]: {node}:4{rank:03d}:5{rank:03d} [{rank % 8}] NCCL INFO "
                         "comm 0x55d0c8a0 rank {rank} nranks 32 cudaDev {dev} busId {bus} - "
                         "Abort COMPLETE".format(rank=rank, dev=rank % 8,
                                                 bus=BUS_IDS[rank % 8][5:]))
        d = OUT / node
        d.mkdir(parents=True, exist_ok=True)
        (d / f"rank{rank:02d}.log").write_text("\n".join(lines) + "\n")


def slurm_output() -> None:
    tk = T_FAIL + timedelta(minutes=10, seconds=31)
    text = f"""\
W1114 {tk:%H:%M:%S}.118000 140233 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 40001 closing signal SIGTERM
E1114 {tk:%H:%M:%S}.902000 140233 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 0 (pid: 40000) of binary: /opt/venv/bin/python
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 919, in main
    run(args)
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 263, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : {tk:%Y-%m-%d_%H:%M:%S}
  host      : gpu-node01
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 40000)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 40000
============================================================
srun: error: gpu-node01: task 0: Exited with exit code 1
srun: error: gpu-node02: task 1: Exited with exit code 1
srun: error: gpu-node04: task 3: Exited with exit code 1
srun: error: gpu-node03: task 2: Killed
slurmstepd: error: *** STEP 4711.0 ON gpu-node01 CANCELLED AT {tk:%Y-%m-%dT%H:%M:%S} ***
"""
    (OUT / "slurm-4711.out").write_text(text)


def main() -> None:
    rng = random.Random(4711)
    kern_logs(rng)
    rank_logs(rng)
    slurm_output()


if __name__ == "__main__":
    main()
