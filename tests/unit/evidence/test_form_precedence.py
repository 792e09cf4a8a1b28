"""The round-2 forms of issue #21 in context: a general form is recognised in wordings no fixture
has, and a weak or consequential form never outranks the cause next to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths

AS_CLI = ScanOptions(suspicious_lines=True)


def _first(tmp_path: Path, text: str) -> tuple[str, str]:
    path = tmp_path / "run.log"
    path.write_text(text, encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, AS_CLI)
    incidents = [i for i in correlate(events, rules) if not i.suspicious]
    assert incidents, "no incident"
    return incidents[0].category.value, incidents[0].action.value


@pytest.mark.parametrize("line", [
    # GPU context + "out of memory", in wordings of stacks that have no fixture here.
    "F0101 12:00:00.000000 42 gpu_allocator.cc:88] Check failed: cudaMallocAsync: out of memory",
    "torch_xla RuntimeError: Resource exhausted: Out of memory while trying to allocate 4.00G.",
    "[E] cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY while creating the KV pool",
    "RuntimeError: Not enough GPU memory to hold the model weights on device 3",
])
def test_gpu_oom_form_in_unseen_wordings(tmp_path: Path, line: str) -> None:
    assert _first(tmp_path, line + "\n") == ("oom_gpu", "fix_config")


def test_host_oom_killing_a_process_named_after_gpus_is_host_oom(tmp_path: Path) -> None:
    line = ("[ 9120.331] Out of memory: Killed process 5312 (gpu_burn) total-vm:81234560kB, "
            "anon-rss:64112000kB\n")
    assert _first(tmp_path, line)[0] == "oom_host"


def test_allocator_pressure_does_not_outrank_the_crash_after_it(tmp_path: Path) -> None:
    text = (
        "2024-03-01 10:00:00.1: W tensorflow/core/common_runtime/bfc_allocator.cc:290] Allocator "
        "(GPU_0_bfc) ran out of memory trying to allocate 2.10GiB with freed_by_count=0. The "
        "caller indicates that this is not a failure\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    assert _first(tmp_path, text)[0] == "cuda_software_bug"


def test_sockets_closing_after_a_watchdog_timeout_are_a_hang(tmp_path: Path) -> None:
    text = (
        "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600071 milliseconds before timing out.\n"
        "node7:2211:2290 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by "
        "remote peer node2<40221>\n"
    )
    assert _first(tmp_path, text) == ("nccl_timeout_hang", "restart_job")


def test_a_down_ib_port_does_not_outrank_a_gpu_oom(tmp_path: Path) -> None:
    text = (
        "\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB "
        "total capacity)\n"
    )
    assert _first(tmp_path, text)[0] == "oom_gpu"


def test_a_dead_ray_actor_is_a_consequence_of_the_oom_that_killed_it(tmp_path: Path) -> None:
    text = (
        "[2024-05-02 11:20:01] kernel: Memory cgroup out of memory: Killed process 88123 "
        "(ray::RolloutWorker) total-vm:98121312kB\n"
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
    )
    assert _first(tmp_path, text) == ("oom_host", "fix_config")


def test_a_dead_ray_actor_alone_is_not_a_code_bug(tmp_path: Path) -> None:
    text = "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
    assert _first(tmp_path, text)[0] == "unknown"
