"""A rank that leaves a process tree behind the way real training jobs do: a helper program
(``sleep``), a multiprocessing worker, and a daemonized grandchild (double fork + ``setsid``)
whose parent exits at once. It writes every pid it started to ``$SPAWN_PIDS_DIR/<rank>.json``,
then idles (the tests kill its supervisor)."""

import json
import multiprocessing
import os
import subprocess
import sys
import time


def worker() -> None:
    time.sleep(1000)


def daemon() -> int:
    """Double fork: the middle process exits, the grandchild is in a session of its own."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.execvp("sleep", ["sleep", "1001"])
        os.write(write_end, str(grandchild).encode())
        os._exit(0)
    os.waitpid(middle, 0)
    os.close(write_end)
    return int(os.read(read_end, 64))


if __name__ == "__main__":
    rank = os.environ["RANK"]
    helper = subprocess.Popen(["sleep", "1000"])
    mp = multiprocessing.get_context("spawn").Process(target=worker)
    mp.start()
    pids = {"python": os.getpid(), "sleep": helper.pid, "worker": mp.pid, "daemon": daemon()}
    out = os.path.join(os.environ["SPAWN_PIDS_DIR"], f"{rank}.json")
    with open(out + ".tmp", "w") as f:
        json.dump(pids, f)
    os.replace(out + ".tmp", out)
    print(f"rank {rank} spawned {pids}", flush=True)
    while True:
        time.sleep(1)
        sys.stdout.flush()
