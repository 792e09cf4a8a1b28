"""The fix the evidence names (remedies.py): a hang among a process group's first collectives,
an installation of the wrong version and a network that was never set up are settings to
change, whatever the rule's default action. Every log line here is hand-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.incidents import Incident
from trainguard.evidence.remedies import (
    EARLY_COLLECTIVES,
    EARLY_TIMEOUT,
    INSTALL_MISMATCH,
    NETWORK_SETUP,
    SHORT_TIMEOUT,
    SHORT_TIMEOUT_MS,
    early_timeout,
    evidence_remedy,
    install_mismatch,
    network_setup,
    short_timeout,
    timeout_limits_ms,
    timeout_sequence_numbers,
)
from trainguard.taxonomy import Action, Category


def first(tmp_path: Path, lines: list[str]) -> Incident:
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    incidents = correlate(events, rules)
    assert incidents, "no incident"
    return incidents[0]


def watchdog(seq: int, rank: int = 3, limit_ms: int = 600000) -> str:
    return (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:612] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, NumelIn=4096, "
            f"NumelOut=4096, Timeout(ms)={limit_ms}) ran for {limit_ms + 104} milliseconds "
            "before timing out.")


def test_sequence_numbers_in_both_watchdog_forms() -> None:
    lines = [watchdog(4),
             "[rank0]:[E ProcessGroupNCCL.cpp:1600] [PG 0 Rank 0] Timeout at NCCL work: 9, last "
             "enqueued NCCL work: 9, last completed NCCL work: 8.",
             "[rank0]:[E ProcessGroupNCCL.cpp:630] [Rank 0] Work WorkNCCL(SeqNum=9, "
             "OpType=ALLREDUCE) timed out in blocking wait",
             "[PG 0 Rank 1] First PG on this rank to signal dumping. (timeout) detected by "
             "watchdog at work: 11, last enqueued NCCL work: 11",
             "epoch 2 step 40 loss 1.93"]
    assert timeout_sequence_numbers(lines) == [4, 9, 11]


@pytest.mark.parametrize(("seqs", "early"), [
    ([1], True), ([EARLY_COLLECTIVES, 2], True), ([EARLY_COLLECTIVES + 1], False),
    ([2, 7310], False), ([], False)])
def test_every_timeout_must_name_a_set_up_collective(seqs: list[int], early: bool) -> None:
    assert early_timeout([watchdog(s, rank=i) for i, s in enumerate(seqs)]) is early


def test_a_hang_in_the_first_collectives_is_a_setting(tmp_path: Path) -> None:
    inc = first(tmp_path, ["Map (num_proc=8):  61%|######    | 61000/100000 [29:58<19:10]",
                           watchdog(2)])
    assert inc.category is Category.NCCL_TIMEOUT_HANG
    assert inc.root_cause.action is Action.RESTART_JOB  # the rule's default ...
    assert inc.action is Action.FIX_CONFIG  # ... and what the collective number says
    how = inc.to_dict()["inferred_action"]
    assert isinstance(how, dict)
    assert how["cues"] == [EARLY_TIMEOUT] and how["rule_action"] == "restart_job"


def test_a_hang_after_training_started_stays_a_restart(tmp_path: Path) -> None:
    inc = first(tmp_path, ["step 5000 loss 1.71", watchdog(48211)])
    assert (inc.category, inc.action) == (Category.NCCL_TIMEOUT_HANG, Action.RESTART_JOB)


def test_limits_in_the_nccl_and_gloo_forms() -> None:
    lines = [watchdog(812, limit_ms=60000),
             "[E ProcessGroupGloo.cpp:138] Rank 1 failed to pass monitoredBarrier in 30000 ms",
             "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:84] Timed "
             "out waiting 45000ms for recv operation to complete",
             "epoch 3 step 60000 loss 1.21"]
    assert timeout_limits_ms(lines) == [60000, 45000]


@pytest.mark.parametrize(("limits", "short"), [
    ([60000], True), ([1], True), ([SHORT_TIMEOUT_MS - 1, 60000], True),
    ([SHORT_TIMEOUT_MS], False), ([60000, 1800000], False), ([], False)])
def test_every_limit_named_must_be_short(limits: list[int], short: bool) -> None:
    assert short_timeout([watchdog(900 + i, rank=i, limit_ms=t)
                          for i, t in enumerate(limits)]) is short


def test_a_hang_under_a_short_limit_is_a_setting(tmp_path: Path) -> None:
    """Mid-training (collective 4127), but the watchdog was set to one minute: a validation pass
    on rank 0 outlasts it, and a rerun would trip it again."""
    inc = first(tmp_path, ["step 8000 loss 1.64", watchdog(4127, limit_ms=60000)])
    assert inc.category is Category.NCCL_TIMEOUT_HANG
    assert inc.root_cause.action is Action.RESTART_JOB
    assert inc.action is Action.FIX_CONFIG
    how = inc.to_dict()["inferred_action"]
    assert isinstance(how, dict)
    assert how["cues"] == [SHORT_TIMEOUT] and how["rule_action"] == "restart_job"


def test_a_hang_under_a_default_limit_stays_a_restart(tmp_path: Path) -> None:
    for limit in (600000, 1800000):
        inc = first(tmp_path, ["step 8000 loss 1.64", watchdog(4127, limit_ms=limit)])
        assert inc.action is Action.RESTART_JOB, limit


def test_one_late_rank_means_training_had_started(tmp_path: Path) -> None:
    inc = first(tmp_path, [watchdog(3, rank=0), watchdog(3105, rank=1)])
    assert inc.action is Action.RESTART_JOB


@pytest.mark.parametrize("line", [
    "OSError: libnccl.so.2: cannot open shared object file: No such file or directory",
    "ImportError: /opt/venv/lib/python3.11/site-packages/fused_ops/_C.so: undefined symbol: "
    "_ZN2at4zeros",
    "ImportError: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.32' not found",
    "RuntimeError: CUDA error: invalid device function",
    "CUDA error: no kernel image is available for execution on the device",
    "CUDA driver version is insufficient for CUDA runtime version",
    "Failed to initialize NVML: Driver/library version mismatch",
    "NVIDIA H200 with CUDA capability sm_90 is not compatible with the current PyTorch "
    "installation.",
])
def test_install_mismatch_forms(line: str) -> None:
    assert install_mismatch(["step 10", line])


@pytest.mark.parametrize("line", [
    "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
    "ModuleNotFoundError: No module named 'mytools'",  # could be the program's own module
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "loading shared object cache from /data/cache",
])
def test_other_errors_are_no_install_mismatch(line: str) -> None:
    assert not install_mismatch([line])


def test_an_import_of_a_mismatched_build_is_a_setting(tmp_path: Path) -> None:
    inc = first(tmp_path, [
        "Traceback (most recent call last):",
        '  File "/home/kim/exp/train.py", line 7, in <module>',
        "    import fused_ops",
        "ImportError: /opt/venv/lib/python3.11/site-packages/fused_ops/_C.so: undefined "
        "symbol: _ZN2at4zeros"])
    assert inc.root_cause.action is Action.FIX_CODE
    assert inc.action is Action.FIX_CONFIG
    how = inc.to_dict()["inferred_action"]
    assert isinstance(how, dict) and how["cues"] == [INSTALL_MISMATCH]


def test_the_mismatch_may_sit_on_another_line_of_the_incident(tmp_path: Path) -> None:
    inc = first(tmp_path, ["CUDA kernel launch failed:", "  Error code: 98",
                           "  Error text: invalid device function",
                           "Segmentation fault (core dumped)"])
    assert inc.root_cause.action is Action.FIX_CODE
    assert inc.action is Action.FIX_CONFIG


def test_a_plain_program_error_stays_a_code_fix(tmp_path: Path) -> None:
    inc = first(tmp_path, [
        "Traceback (most recent call last):",
        '  File "/home/kim/exp/train.py", line 40, in <module>',
        "    total = steps + name",
        "TypeError: unsupported operand type(s) for +: 'int' and 'str'"])
    assert (inc.category, inc.action) == (Category.USER_CODE_ERROR, Action.FIX_CODE)


def test_the_remedy_leaves_other_actions_alone() -> None:
    mismatch = ["Failed to initialize NVML: Driver/library version mismatch"]
    assert evidence_remedy(Category.GPU_HARDWARE, Action.REBOOT_NODE, mismatch) is None
    assert evidence_remedy(Category.OOM_GPU, Action.FIX_CONFIG, [watchdog(1)]) is None
    assert evidence_remedy(Category.NETWORK_IB, Action.CHECK_NETWORK, [watchdog(1)]) is None
    got = evidence_remedy(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, mismatch)
    assert got is not None and (got.action, got.reason) == (Action.FIX_CONFIG, INSTALL_MISMATCH)


@pytest.mark.parametrize("line", [
    "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory",
    "OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
    "python3: error while loading shared libraries: libnccl.so.2: cannot open shared object "
    "file: No such file or directory",
    "ImportError: /opt/venv/lib/python3.11/site-packages/fused_attn_cuda.cpython-311-x86_64-"
    "linux-gnu.so: undefined symbol: _ZN3c104cuda20getCurrentCUDAStreamEa",
])
def test_a_cuda_library_that_cannot_load_is_the_cuda_stack(tmp_path: Path, line: str) -> None:
    inc = first(tmp_path, [
        "Traceback (most recent call last):",
        '  File "/home/kim/exp/train.py", line 2, in <module>',
        "    import fused_attn", line])
    assert inc.root_cause.signature == "cuda_library_load_failed"
    assert (inc.category, inc.root_cause.action) == (Category.CUDA_SOFTWARE_BUG,
                                                     Action.FIX_CONFIG)


@pytest.mark.parametrize("line", [
    # TensorFlow probing for a GPU library: a warning, the run may go on without a GPU.
    "2024-05-02 10:01:13.123456: W tensorflow/stream_executor/platform/default/dso_loader.cc:64]"
    " Could not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot "
    "open shared object file: No such file or directory",
    # A library unrelated to CUDA.
    "ImportError: libGL.so.1: cannot open shared object file: No such file or directory",
])
def test_other_library_loads_are_not_the_cuda_stack(tmp_path: Path, line: str) -> None:
    path = tmp_path / "job.log"
    path.write_text(line + "\n", encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    assert all(e.signature != "cuda_library_load_failed" for e in events)


# --- a network that was never set up ------------------------------------------------------------

@pytest.mark.parametrize("lines", [
    # NCCL's system-call / internal-check return codes, no failed transfer beside them.
    ["[rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
     "[rank2]: ncclSystemError: System call (e.g. socket, malloc) or external library call "
     "failed or device error."],
    ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, internal error, NCCL version 2.7.8",
     "ncclInternalError: Internal check failed. Proxy Call to rank 0 failed (Setup)"],
    # A peer at a loopback address: the host name resolves to 127.x.
    ["RuntimeError: [gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:41977: Connection "
     "refused"],
    # A link-local RoCE GID on a failed completion: the GID index is the setting.
    ["gpu7:211:390 [3] transport/net_ib.cc:1421 NCCL WARN NET/IB : Got completion from peer "
     "10.4.0.12<37112> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid "
     "fe80::b8ce:f6ff:fe10:aa02 remoteGid fe80::b8ce:f6ff:fe10:ab17"],
    ["node3:77:77 [0] NCCL INFO NET/Socket : No usable listening interface found"],
])
def test_network_setup_forms(lines: list[str]) -> None:
    assert network_setup(["epoch 0 step 0", *lines])
    got = evidence_remedy(Category.NETWORK_IB, Action.CHECK_NETWORK, lines)
    assert got is not None and (got.action, got.reason) == (Action.FIX_CONFIG, NETWORK_SETUP)


@pytest.mark.parametrize("lines", [
    # A transfer that failed on a routable GID: the fabric.
    ["gpu7:211:390 [3] transport/net_ib.cc:1421 NCCL WARN NET/IB : Got completion from peer "
     "10.4.0.12<37112> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
     "::ffff:10.4.0.11 remoteGids::ffff:10.4.0.12"],
    # A system error beside a connection reset mid-run: the transfer failed.
    ["RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.1",
     "node3:77:90 [1] misc/socket.cc:538 NCCL WARN Net : Call to recv from 10.1.1.9<5522> "
     "failed : Connection reset by peer"],
    ["gpu2:51:60 [0] transport/net_ib.cc:190 NCCL WARN NET/IB : mlx5_3:1 Got async event : "
     "port error"],
    # A socket address that is not loopback.
    ["RuntimeError: [gloo/transport/tcp/pair.cc:799] connect [10.20.0.7]:41977: Connection "
     "refused"],
])
def test_a_failed_transfer_stays_a_network_check(lines: list[str]) -> None:
    assert not network_setup(lines)
    assert evidence_remedy(Category.NETWORK_IB, Action.CHECK_NETWORK, lines) is None


def test_the_network_remedy_only_turns_a_network_check(tmp_path: Path) -> None:
    setup = ["ncclInternalError: Internal check failed."]
    assert evidence_remedy(Category.NETWORK_IB, Action.EXCLUDE_NODE, setup) is None
    inc = first(tmp_path, [
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"])
    assert inc.category is Category.NETWORK_IB
    assert inc.root_cause.action is Action.CHECK_NETWORK
    assert inc.action is Action.FIX_CONFIG
    how = inc.to_dict()["inferred_action"]
    assert isinstance(how, dict) and how["cues"] == [NETWORK_SETUP]
