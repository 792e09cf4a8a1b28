"""Root cause over symptom (precedence.py) and the general failure forms added with it:
timeouts over the transport errors they cause, host OOM over the scheduler, user code over CUDA
noise, exceptions inside checkpoint code, storage errno forms and ECC counters. Every log line
here is hand-written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.precedence import is_user_frame
from trainguard.taxonomy import Action, Category

T0 = datetime(2025, 3, 4, 8, 0, 0, tzinfo=UTC)
OPTIONS = ScanOptions(host_from_path=True, default_year=2025, suspicious_lines=True)


def first(tmp_path: Path, lines: list[str]) -> Category:
    path = tmp_path / "node7" / "job.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, OPTIONS)
    incidents = correlate(events, rules)
    assert incidents, "no incident"
    return incidents[0].category


def ts(t: datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S}"


def watchdog(t: datetime, rank: int = 2) -> str:
    return (f"{ts(t)} [Rank {rank}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=88, OpType=ALLGATHER, NumelIn=512, NumelOut=4096, "
            "Timeout(ms)=1800000) ran for 1800021 milliseconds before timing out.")


@pytest.mark.parametrize("symptom", [
    "NCCL WARN socketProgress: Connection closed by remote peer worker-3<41022>",
    "RuntimeError: NCCL error: remote process exited or there was a network error",
    "torch.distributed.DistStoreError: TCPStore socket timed out, worker-0:29500",
    "ncclSystemError: unhandled system error (run with NCCL_DEBUG=INFO for details)",
])
def test_a_generic_transport_error_before_the_timeout_is_its_symptom(
        tmp_path: Path, symptom: str) -> None:
    got = first(tmp_path, [f"{ts(T0)} {symptom}", watchdog(T0 + timedelta(seconds=30))])
    assert got is Category.NCCL_TIMEOUT_HANG


def test_a_hard_transport_error_before_the_timeout_stays_the_cause(tmp_path: Path) -> None:
    got = first(tmp_path, [
        f"{ts(T0)} host7:99:120 [3] NCCL WARN NET/IB : Got completion from peer "
        "10.1.1.9<4411> with status=5 opcode=1 len=0 vendor err 244 (Send)",
        watchdog(T0 + timedelta(seconds=30))])
    assert got is Category.NETWORK_IB


def test_a_root_cause_next_to_the_timeout_wins(tmp_path: Path) -> None:
    got = first(tmp_path, [
        f"{ts(T0)} OSError: [Errno 5] Input/output error: '/lustre/shards/part-00017.bin'",
        watchdog(T0 + timedelta(seconds=30))])
    assert got is Category.STORAGE_IO


def test_host_oom_kill_outranks_the_scheduler_reporting_the_node(tmp_path: Path) -> None:
    got = first(tmp_path, [
        f"{ts(T0)} kernel: Memory cgroup out of memory: Killed process 5120 (python3) "
        "total-vm:912345kB, anon-rss:880000kB",
        f"{ts(T0 + timedelta(seconds=20))} slurmctld: error: Nodes node7 not responding",
    ])
    assert got is Category.OOM_HOST


def test_a_scheduler_failure_without_oom_stays_scheduler(tmp_path: Path) -> None:
    got = first(tmp_path, [
        f"{ts(T0)} slurmctld: error: Nodes node7 not responding",
        f"{ts(T0)} process exited with SIGKILL",
    ])
    assert got is Category.SCHEDULER_NODE_FAILURE


USER_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/home/ana/proj/train.py", line 210, in <module>',
    "    main(cfg)",
    '  File "/home/ana/proj/data/collate.py", line 48, in pad_batch',
    "    lengths = [len(x) for x in batch['tokens']]",
    "TypeError: 'NoneType' object is not subscriptable",
]


def test_a_plain_python_error_in_user_code_outranks_the_native_abort(tmp_path: Path) -> None:
    got = first(tmp_path, [*USER_TRACEBACK, "Fatal Python error: Aborted",
                           "Aborted (core dumped)"])
    assert got is Category.USER_CODE_ERROR


def test_the_same_error_inside_a_library_does_not_outrank_a_cuda_error(tmp_path: Path) -> None:
    lib = [line.replace("/home/ana/proj/data/collate.py",
                        "/opt/conda/lib/python3.11/site-packages/apex/ops.py")
           for line in USER_TRACEBACK]
    got = first(tmp_path, [*lib, "Segmentation fault (core dumped)"])
    assert got is Category.CUDA_SOFTWARE_BUG


@pytest.mark.parametrize(("frame", "user"), [
    ("/home/ana/proj/train.py:10 in main", True),
    ("train.py:3 in <module>", True),
    ("/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py:1501 in _call_impl",
     False),
    ("<frozen runpy>:88 in _run_code", False),
])
def test_user_frames(frame: str, user: bool) -> None:
    assert is_user_frame(frame) is user


def test_an_exception_raised_inside_checkpoint_library_code_is_a_checkpoint_failure(
        tmp_path: Path) -> None:
    got = first(tmp_path, [
        "Traceback (most recent call last):",
        '  File "/home/ana/proj/train.py", line 300, in <module>',
        "    dcp.load(state, checkpoint_id=path)",
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/checkpoint/'
        'filesystem.py", line 612, in read_data',
        "    raise RuntimeError(msg)",
        "RuntimeError: shard __0_2.distcp holds 1048576 bytes, expected 4194304",
    ])
    assert got is Category.CHECKPOINT


def test_a_state_dict_that_does_not_fit_the_model_is_not_a_checkpoint_failure(
        tmp_path: Path) -> None:
    """Module.load_state_dict reads no file: it compares keys and shapes with the model."""
    got = first(tmp_path, [
        "Traceback (most recent call last):",
        '  File "/home/ana/proj/eval.py", line 41, in <module>',
        "    load_weights(net, args.weights)",
        '  File "/venv/lib/python3.11/site-packages/visionkit/ckpt.py", line 88, in '
        "load_weights",
        "    net.load_state_dict(state, strict=True)",
        '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 2189, in '
        "load_state_dict",
        "    raise RuntimeError(",
        "RuntimeError: Error(s)",
    ])
    assert got is Category.USER_CODE_ERROR


@pytest.mark.parametrize("line", [
    "ERROR: could not restore from checkpoint /data/run7/step_400, giving up",
    "checkpoint upload to gs://bucket/run7 failed after 3 retries",
    "Unable to load ckpt epoch=3.ckpt: truncated header",
])
def test_checkpoint_operation_failures_in_any_words(tmp_path: Path, line: str) -> None:
    assert first(tmp_path, [f"{ts(T0)} {line}"]) is Category.CHECKPOINT


def test_loading_a_checkpoint_is_not_a_failure(tmp_path: Path) -> None:
    rules = load_rules()
    assert rules.match("Loading checkpoint shards: 100%|##########| 4/4") is None
    assert rules.match("checkpoint saved to /ckpt/step_100 (no errors)") is None


@pytest.mark.parametrize("line", [
    "OSError: [Errno 5] Can't read data at offset 4096",
    "reader thread: I/O error while reading block 88 of /mnt/data/shard.tar",
    "mkdir /scratch/run: Structure needs cleaning",
])
def test_storage_errno_forms(tmp_path: Path, line: str) -> None:
    assert first(tmp_path, [f"{ts(T0)} {line}"]) is Category.STORAGE_IO


@pytest.mark.parametrize(("line", "after"), [
    ('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="5",UUID="GPU-1"} 3', []),
    ("gpu 5: uncorrected_memory_errors: 2", []),
    ("        Double Bit", ["            Device Memory     : 2", "            Register File : 0",
                            "            Total             : 2"]),
])
def test_uncorrectable_ecc_counters(tmp_path: Path, line: str, after: list[str]) -> None:
    assert first(tmp_path, [line, *after]) is Category.GPU_MEMORY_ECC


@pytest.mark.parametrize(("line", "after"), [
    ('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="5",UUID="GPU-1"} 0', []),
    ("        Double Bit", ["            Device Memory     : 0", "            Total  : 0"]),
])
def test_zero_ecc_counters_are_no_evidence(line: str, after: list[str]) -> None:
    m = load_rules().match(line, after)
    assert m is None or m.rule.category is not Category.GPU_MEMORY_ECC


def test_a_socket_failure_at_run_time_is_a_symptom_not_an_interface_setting(
        tmp_path: Path) -> None:
    got = first(tmp_path, [
        f"{ts(T0)} node7:77:90 [2] NCCL WARN NET/Socket : Call to recv from "
        "10.2.0.4<50322> failed : Connection reset by peer",
        watchdog(T0 + timedelta(seconds=30))])
    assert got is Category.NCCL_TIMEOUT_HANG


def test_a_device_side_assert_is_bad_input_to_a_kernel(tmp_path: Path) -> None:
    got = first(tmp_path, [f"{ts(T0)} RuntimeError: CUDA error: device-side assert triggered"])
    assert got is Category.USER_CODE_ERROR


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: device-side assert triggered",
    "/src/aten/native/cuda/Loss.cu:250: nll_loss_forward_kernel: block: [0,0,0], thread: [3,0,0] "
    "Assertion `t >= 0 && t < n_classes` failed.",
    "/src/aten/native/cuda/Indexing.cu:1290: indexSelectSmallIndex: block: [4,0,0], thread: "
    "[64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
])
def test_a_kernel_input_check_is_fixed_in_the_sizes_or_the_data(tmp_path: Path,
                                                                line: str) -> None:
    path = tmp_path / "job.log"
    path.write_text(f"{ts(T0)} epoch 1 step 3\n{ts(T0)} {line}\n", encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, OPTIONS)
    inc = correlate(events, rules, learned=False)[0]
    assert (inc.category, inc.action) == (Category.USER_CODE_ERROR, Action.FIX_CONFIG)


def test_a_kernel_fault_next_to_a_device_side_assert_stays_a_cuda_fault(tmp_path: Path) -> None:
    got = first(tmp_path, [
        f"{ts(T0)} RuntimeError: CUDA error: an illegal memory access was encountered",
        f"{ts(T0)} RuntimeError: CUDA error: device-side assert triggered"])
    assert got is Category.CUDA_SOFTWARE_BUG


def test_a_boot_clock_gpu_memory_report_goes_before_the_cuda_error(tmp_path: Path) -> None:
    node = tmp_path / "node7"
    node.mkdir()
    (node / "dmesg.log").write_text(
        "[ 8812.123456] NVRM: Xid (PCI:0000:3b:00): 94, pid=4411, name=python3, Contained: "
        "CE User Channel (0x9). RST: No, D-RST: No\n", encoding="utf-8")
    (node / "train.log").write_text("".join(
        f"{ts(t)} RuntimeError: CUDA error: an illegal memory access was encountered\n"
        for t in (T0, T0 + timedelta(hours=3))), encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(node)], rules, OPTIONS)
    incidents = correlate(events, rules)
    assert len(incidents) == 3
    assert incidents[0].category is Category.GPU_MEMORY_ECC
    assert incidents[0].xid == 94


def test_a_gpu_report_on_the_same_clock_hours_apart_does_not_jump_ahead(tmp_path: Path) -> None:
    node = tmp_path / "node7"
    node.mkdir()
    (node / "train.log").write_text(
        f"{ts(T0)} node7 kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=4411, name=python3, "
        "Contained: CE User Channel (0x9). RST: No, D-RST: No\n"
        f"{ts(T0 + timedelta(hours=5))} RuntimeError: CUDA error: an illegal memory access was "
        "encountered\n", encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(node)], rules, OPTIONS)
    incidents = correlate(events, rules)
    assert incidents[0].category is Category.CUDA_SOFTWARE_BUG


GLOO_THROW = ["terminate called after throwing an instance of 'gloo::IoException'",
              "  what():  [gloo/transport/tcp/pair.cc:301] connect [10.1.4.7]:41700: "
              "Connection refused"]


def test_an_abort_ranks_below_the_exception_it_ends(tmp_path: Path) -> None:
    assert first(tmp_path, [*GLOO_THROW, "Aborted (core dumped)"]) is Category.NETWORK_IB


def test_an_abort_alone_stays_a_native_crash(tmp_path: Path) -> None:
    got = first(tmp_path, ["step 12 loss 2.01", "Fatal Python error: Aborted",
                           "Aborted (core dumped)"])
    assert got is Category.CUDA_SOFTWARE_BUG


def test_a_segmentation_fault_keeps_its_rank_over_a_transport_error(tmp_path: Path) -> None:
    got = first(tmp_path, [*GLOO_THROW, "Segmentation fault (core dumped)"])
    assert got is Category.CUDA_SOFTWARE_BUG
