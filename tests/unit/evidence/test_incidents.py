"""Correlating events into incidents: one root cause, its consequences as related events."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trainguard.evidence import (
    FailureEvent,
    Incident,
    ScanOptions,
    correlate,
    load_rules,
    scan_paths,
)
from trainguard.evidence.incidents import deduplicate
from trainguard.taxonomy import Action, Category, Severity

YEAR = 2024
T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
OPTIONS = ScanOptions(host_from_path=True, default_year=YEAR)
GPUS_PER_HOST = 8


# --- log line builders, in the formats the real software writes ---------------------------------


def syslog(t: datetime, host: str, msg: str) -> str:
    """rsyslog / journalctl short: ``May  1 10:00:00 node2 kernel: [uptime] msg``."""
    uptime = 812345.0 + (t - T0).total_seconds()
    return f"{t:%b} {t.day:>2} {t:%H:%M:%S} {host} kernel: [{uptime:13.6f}] {msg}"


def glog_tid(t: datetime, rank: int, msg: str) -> str:
    """glog (PyTorch C++ with a thread id): ``[rank3]:[E0501 10:00:00.123456 1234 file:line]``."""
    return (f"[rank{rank}]:[E{t:%m%d} {t:%H:%M:%S}.{t.microsecond:06d} {4000 + rank} "
            f"ProcessGroupNCCL.cpp:616] {msg}")


def c10_log(t: datetime, rank: int, msg: str) -> str:
    """PyTorch >= 2.4 c10 logging: nanoseconds, no thread id, month not zero-padded."""
    return (f"[rank{rank}]:[E{t.month}{t.day:02d} {t:%H:%M:%S}.{t.microsecond:06d}257 "
            f"ProcessGroupNCCL.cpp:616] {msg}")


GLOG_FORMATS: dict[str, Callable[[datetime, int, str], str]] = {
    "glog-with-thread-id": glog_tid,
    "c10-pytorch-2.4": c10_log,
}


def watchdog_msg(rank: int, seq: int = 1580, ran_ms: int = 600060) -> str:
    return (f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
            f"OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran "
            f"for {ran_ms} milliseconds before timing out.")


XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python, GPU has fallen off the bus."
OOM_KILL = ("Out of memory: Killed process 48211 (python) total-vm:412340112kB, "
            "anon-rss:398765432kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:801234kB "
            "oom_score_adj:0")


def host_of(rank: int) -> str:
    return f"node{rank // GPUS_PER_HOST}"


def write(path: Path, lines: Iterable[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def write_rank_timeouts(root: Path, ranks: Iterable[int], at: datetime,
                        fmt: Callable[[datetime, int, str], str] = glog_tid,
                        seq: int = 1580) -> None:
    """One per-rank log per rank, under ``root/<host>/rank<N>.log``."""
    for rank in ranks:
        t = at + timedelta(milliseconds=7 * rank)
        write(root / host_of(rank) / f"rank{rank}.log", [
            f"[rank{rank}]: step 1200 | lr 2.9e-04 | loss 2.3110 | tokens/s 51234",
            fmt(t, rank, watchdog_msg(rank, seq=seq)),
        ])


def classify(root: Path) -> tuple[list[FailureEvent], list[Incident]]:
    rules = load_rules()
    events, stats = scan_paths([str(root)], rules, OPTIONS)
    assert stats.warnings == []
    return events, correlate(events, rules)


# --- the core story ----------------------------------------------------------------------------


def test_one_dead_gpu_explains_63_ranks_of_nccl_timeouts(tmp_path: Path) -> None:
    # 8 hosts x 8 GPUs. Rank 19 (node2, GPU 3) falls off the bus at 10:00; the other 63 ranks
    # block in the next all-reduce and their watchdogs fire 10 minutes later.
    dead_rank = 19
    write(tmp_path / "node2" / "kern.log", [
        syslog(T0 - timedelta(minutes=5), "node2", "EXT4-fs (nvme0n1p1): mounted filesystem"),
        syslog(T0, "node2", XID79),
        syslog(T0 + timedelta(seconds=1), "node2", "NVRM: GPU at PCI:0000:3b:00: "
               "GPU-3c5e8e0a-7d2b-4b43-9f1e-2a8b6c1d9e77"),
    ])
    others = [r for r in range(8 * GPUS_PER_HOST) if r != dead_rank]
    write_rank_timeouts(tmp_path, others, T0 + timedelta(minutes=10))

    events, incidents = classify(tmp_path)

    assert len(events) == 64
    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.category is Category.GPU_HARDWARE
    assert inc.action is Action.REBOOT_NODE
    assert inc.severity is Severity.FATAL
    assert inc.host == "node2"
    assert inc.xid == 79
    assert inc.gpu == "0000:3b:00.0"
    assert inc.root_cause.signature == "xid"
    assert len(inc.related) == 63
    assert {e.signature for e in inc.related} == {"nccl_watchdog_timeout"}
    assert sorted(e.rank for e in inc.related) == others
    assert inc.hosts == tuple(f"node{h}" for h in range(8))
    assert inc.start == T0.timestamp()
    assert inc.end == pytest.approx((T0 + timedelta(minutes=10)).timestamp(), abs=1.0)
    assert inc.event_count == 64
    assert "node2" in inc.summary

    as_json = inc.to_dict()
    assert as_json["category"] == "gpu_hardware"
    assert len(as_json["related"]) == 63


@pytest.mark.parametrize("fmt", GLOG_FORMATS.values(), ids=GLOG_FORMATS.keys())
def test_two_failures_three_hours_apart_are_two_incidents(
        tmp_path: Path, fmt: Callable[[datetime, int, str], str]) -> None:
    t1 = T0
    t2 = T0 + timedelta(hours=3)
    write(tmp_path / "node0" / "kern.log", [syslog(t1, "node0", XID79)])
    write(tmp_path / "node1" / "kern.log", [syslog(t2, "node1", OOM_KILL)])
    # First failure: rank 0 (node0) dies; ranks 1-15 time out. Second: rank 8 (node1) is
    # OOM-killed after the restart; the others time out again.
    write_rank_timeouts(tmp_path / "attempt1", range(1, 16), t1 + timedelta(minutes=10), fmt)
    write_rank_timeouts(tmp_path / "attempt2", [r for r in range(16) if r != 8],
                        t2 + timedelta(minutes=10), fmt, seq=20)

    _, incidents = classify(tmp_path)

    assert [i.category for i in incidents] == [Category.GPU_HARDWARE, Category.OOM_HOST]
    first, second = incidents
    assert (first.host, second.host) == ("node0", "node1")
    assert len(first.related) == 15
    assert len(second.related) == 15
    assert {e.field_value("seq") for e in first.related} == {"1580"}
    assert {e.field_value("seq") for e in second.related} == {"20"}


def test_incidents_are_ordered_fatal_hardware_first(tmp_path: Path) -> None:
    # Hours apart, so each is its own incident; the order is by importance, not by time.
    write(tmp_path / "node1" / "kern.log", [
        syslog(T0 - timedelta(hours=2), "node1",
               "NVRM: Xid (PCI:0000:1b:00): 45, pid=1234, name=python, Ch 00000008"),
    ])
    write(tmp_path / "node5" / "trainer.log", [
        "2024-05-01T10:00:00.123456789Z [rank5]: torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.10 GiB of which 1.06 GiB "
        "is free.",
    ])
    write(tmp_path / "node2" / "kern.log", [syslog(T0 + timedelta(hours=2), "node2", XID79)])

    _, incidents = classify(tmp_path)

    assert [(i.category, i.severity) for i in incidents] == [
        (Category.GPU_HARDWARE, Severity.FATAL),
        (Category.OOM_GPU, Severity.FATAL),
        (Category.CUDA_SOFTWARE_BUG, Severity.NON_FATAL),
    ]


def test_hardware_root_cause_wins_even_when_it_is_logged_last(tmp_path: Path) -> None:
    # The kernel flushes the XID after the ranks already reported the hang it caused.
    write_rank_timeouts(tmp_path, range(1, 8), T0 + timedelta(minutes=10))
    write(tmp_path / "node0" / "kern.log",
          [syslog(T0 + timedelta(minutes=10, seconds=30), "node0", XID79)])

    _, incidents = classify(tmp_path)

    assert len(incidents) == 1
    assert incidents[0].category is Category.GPU_HARDWARE
    assert incidents[0].host == "node0"


# --- benign look-alikes and single causes ------------------------------------------------------


def test_fp16_overflow_alone_is_not_an_incident(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "[2024-05-01 10:00:00,123] [INFO] [trainer] step 100 | loss 2.7801",
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768",
        "[2024-05-01 10:00:05,123] [INFO] [trainer] step 101 | loss 2.7744",
    ])
    rules = load_rules()
    events, _ = scan_paths([str(tmp_path)], rules, OPTIONS)

    assert [e.signature for e in events] == ["fp16_loss_scale_overflow"]
    assert events[0].severity is Severity.INFO
    assert correlate(events, rules) == []
    assert [i.category for i in correlate(events, rules, include_info=True)] == [
        Category.UNKNOWN]


def test_benign_overflow_does_not_hide_a_real_failure(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768",
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ])
    _, incidents = classify(tmp_path)
    assert [i.category for i in incidents] == [Category.CUDA_SOFTWARE_BUG]


@pytest.mark.parametrize(
    "line",
    [
        "[2024-05-01 10:00:00,123] [INFO] [trainer] step 4200 | lr 2.9e-04 | loss nan | "
        "grad_norm inf",
        "Epoch 3:  41%|████      | 412/1000 [12:02<17:11,  1.75s/it, loss=nan, v_num=0]",
        "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
    ],
)
def test_nan_loss_is_numerical(tmp_path: Path, line: str) -> None:
    write(tmp_path / "train.log", [line])
    _, incidents = classify(tmp_path)
    assert [i.category for i in incidents] == [Category.NUMERICAL_NAN]
    assert incidents[0].action is Action.FIX_CONFIG


def test_user_error_on_rank_0_is_the_cause_of_the_other_ranks_timeouts(tmp_path: Path) -> None:
    write(tmp_path / "node0" / "rank0.log", [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/workspace/train.py", line 212, in <module>',
        "[rank0]:     main()",
        '[rank0]:   File "/workspace/train.py", line 180, in main',
        "[rank0]:     batch = collate(samples)",
        '[rank0]:   File "/workspace/data.py", line 57, in collate',
        "[rank0]:     raise",
        "[rank0]: ValueError: expected 2048 tokens per sample, got 2047",
    ])
    write_rank_timeouts(tmp_path, range(1, 16), T0 + timedelta(minutes=10))

    _, incidents = classify(tmp_path)

    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.category is Category.USER_CODE_ERROR
    assert inc.action is Action.FIX_CODE
    assert inc.rank == 0
    root = inc.root_cause
    assert root.field_value("exc_type") == "ValueError"
    assert "ValueError" in root.summary
    assert root.field_value("last_frame") == "/workspace/data.py:57 in collate"
    assert len(inc.related) == 15


def test_torchrun_summary_alone_blames_the_host_oom_killer(tmp_path: Path) -> None:
    write(tmp_path / "launcher.log", [
        "E0501 10:00:00.123000 140211 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -9) local_rank: 5 (pid: 48211) of binary: /usr/bin/python3",
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", '
        "line 269, in launch_agent",
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-05-01_10:00:00",
        "  host      : gpu-node-17.cluster.local",
        "  rank      : 13 (local_rank: 5)",
        "  exitcode  : -9 (pid: 48211)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 48211",
        "============================================================",
    ])
    _, incidents = classify(tmp_path)

    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.category is Category.OOM_HOST
    assert inc.host == "gpu-node-17.cluster.local"
    assert inc.rank == 13
    assert inc.root_cause.confidence < 0.5  # an exit code is only a hint


# --- deduplication -----------------------------------------------------------------------------


def test_same_line_in_two_files_is_one_event(tmp_path: Path) -> None:
    line = glog_tid(T0, 3, watchdog_msg(3))
    write(tmp_path / "combined.log", ["[rank0]: step 1200", line])
    write(tmp_path / "rank3.log", [line])
    rules = load_rules()
    events, _ = scan_paths([str(tmp_path)], rules, ScanOptions(default_year=YEAR))
    assert len(events) == 2

    merged = deduplicate(events)

    assert len(merged) == 1
    paths = sorted(Path(e.path).name for e in merged[0].evidence)
    assert paths == ["combined.log", "rank3.log"]
    incidents = correlate(events, rules)
    assert len(incidents) == 1
    assert incidents[0].event_count == 1


def test_same_xid_in_kern_log_and_journal_is_one_event(tmp_path: Path) -> None:
    write(tmp_path / "kern.log", [syslog(T0, "node2", XID79)])
    write(tmp_path / "journal.txt",
          [f"2024-05-01T10:00:00+0000 node2 kernel: {XID79}"])
    rules = load_rules()
    events, _ = scan_paths([str(tmp_path)], rules, ScanOptions(default_year=YEAR))

    incidents = correlate(events, rules)

    assert len(events) == 2
    assert len(incidents) == 1
    assert incidents[0].event_count == 1
    assert len(incidents[0].root_cause.evidence) == 2


def test_distinct_ranks_with_identical_text_are_not_merged(tmp_path: Path) -> None:
    write(tmp_path / "node0" / "rank1.log", [glog_tid(T0, 1, watchdog_msg(1))])
    write(tmp_path / "node0" / "rank2.log", [glog_tid(T0, 2, watchdog_msg(2))])
    rules = load_rules()
    events, _ = scan_paths([str(tmp_path)], rules, OPTIONS)
    assert len(deduplicate(events)) == 2


def test_correlate_of_nothing_is_nothing() -> None:
    assert correlate([], load_rules()) == []


# --- culprit and start come from the cause -----------------------------------------------------

XID48 = ("NVRM: Xid (PCI:0000:3b:00): 48, pid=48211, name=python, Ch 00000010, An uncorrectable "
         "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
         "subpartition 0.")


def ds_overflow(t: datetime) -> str:
    return (f"[{t:%Y-%m-%d %H:%M:%S},000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")


@pytest.mark.parametrize("with_kernel_log", [True, False], ids=["xid-and-cuda", "cuda-only"])
def test_culprit_rank_is_the_rank_that_hit_the_fault_not_the_srun_task(
        tmp_path: Path, with_kernel_log: bool) -> None:
    # Rank 6 (node0, GPU 6) hits an uncorrectable ECC error; the other ranks time out and srun
    # reports its failed tasks by task slot, the first of them "task 1" on node0.
    if with_kernel_log:
        write(tmp_path / "node0" / "kern.log", [syslog(T0, "node0", XID48)])
    write(tmp_path / "node0" / "rank6.log", [glog_tid(
        T0 + timedelta(seconds=1), 6, "[PG 0 Rank 6] Process group watchdog thread terminated "
        "with exception: CUDA error: uncorrectable ECC error encountered")])
    write_rank_timeouts(tmp_path, [r for r in range(16) if r != 6], T0 + timedelta(minutes=10))
    write(tmp_path / "slurm-4711.out", [
        "srun: error: node0: task 1: Exited with exit code 1",
        "srun: error: node1: task 9: Exited with exit code 1",
        "srun: error: node0: task 6: Exited with exit code 1",
    ])

    _, incidents = classify(tmp_path)

    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.category is Category.GPU_MEMORY_ECC
    assert (inc.host, inc.rank) == ("node0", 6)
    if with_kernel_log:
        assert inc.gpu == "0000:3b:00.0"
    assert "rank 6" in inc.summary


def test_launcher_task_names_the_rank_only_when_nothing_else_does(tmp_path: Path) -> None:
    write(tmp_path / "slurm-4711.out", [
        "[2024-05-01 10:00:00,000] ValueError: expected 2048 tokens per sample, got 2047",
        "srun: error: node3: task 5: Exited with exit code 1",
    ])
    _, incidents = classify(tmp_path)
    assert [(i.category, i.host, i.rank) for i in incidents] == [
        (Category.USER_CODE_ERROR, "node3", 5)]


def test_incident_starts_at_its_first_causal_event_not_a_benign_line_before_it(
        tmp_path: Path) -> None:
    # Overflows every 10 minutes from 09:20 (benign); the XID at 10:00; timeouts at 10:10.
    write(tmp_path / "node0" / "train.log",
          [ds_overflow(T0 - timedelta(minutes=m)) for m in (40, 30, 20, 10)])
    write(tmp_path / "node0" / "kern.log", [syslog(T0, "node0", XID79)])
    write_rank_timeouts(tmp_path, range(1, 8), T0 + timedelta(minutes=10))

    _, incidents = classify(tmp_path)

    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.category is Category.GPU_HARDWARE
    assert inc.start == T0.timestamp()
    assert any(e.signature == "fp16_loss_scale_overflow" for e in inc.related)


def test_benign_lines_do_not_chain_two_failures_into_one_incident(tmp_path: Path) -> None:
    # An overflow every 10 minutes between an XID at 10:00 and a host OOM at 12:00: single
    # linkage over every line would make one incident of both.
    write(tmp_path / "node0" / "train.log",
          [ds_overflow(T0 + timedelta(minutes=m)) for m in range(0, 130, 10)])
    write(tmp_path / "node0" / "kern.log", [
        syslog(T0, "node0", XID79), syslog(T0 + timedelta(hours=2), "node0", OOM_KILL)])

    _, incidents = classify(tmp_path)

    assert sorted((i.category, i.start) for i in incidents) == sorted([
        (Category.GPU_HARDWARE, T0.timestamp()),
        (Category.OOM_HOST, (T0 + timedelta(hours=2)).timestamp())])


def test_bundled_sample_starts_at_the_xid_not_at_the_overflow_before_it() -> None:
    sample = Path(__file__).resolve().parents[3] / "examples" / "incidents" / \
        "xid79-allreduce-hang"
    rules = load_rules()
    events, _ = scan_paths([str(sample)], rules, ScanOptions(host_from_path=True))
    inc = correlate(events, rules)[0]
    assert inc.xid == 79
    assert inc.start == inc.root_cause.time
    assert any(e.signature == "fp16_loss_scale_overflow" and e.time is not None
               and e.time < inc.root_cause.time for e in events)
