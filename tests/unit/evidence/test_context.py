"""Evidence that means something only next to its neighbours: checkpoint I/O, a stalled save,
loss-scale runs, network errors after a hang, and ranks that disagree on a collective."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.context import LOSS_SCALE_RUN_SIGNATURE
from trainguard.taxonomy import Action, Category

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
OPTIONS = ScanOptions(host_from_path=True, default_year=2024)


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def first_incident(root: Path) -> tuple[Category, Action]:
    rules = load_rules()
    events, _ = scan_paths([str(root)], rules, OPTIONS)
    incidents = correlate(events, rules, learned=False)  # the context readings, no model
    assert incidents, "no incident"
    return incidents[0].category, incidents[0].action


def ts(t: datetime) -> str:
    return f"[{t:%Y-%m-%d %H:%M:%S},000]"


def watchdog(t: datetime, rank: int, seq: int = 1580, numel: int = 466119168,
             pg: str = "") -> str:
    where = f"[PG {pg} Rank {rank}]" if pg else f"[Rank {rank}]"
    return (f"[rank{rank}]:[E{t:%m%d} {t:%H:%M:%S}.000000 {4000 + rank} ProcessGroupNCCL.cpp:616]"
            f" {where} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
            f"OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for "
            "600060 milliseconds before timing out.")


# --- checkpoint I/O ----------------------------------------------------------------------------

def test_storage_error_while_a_checkpoint_is_being_saved_stays_the_storage_root(
        tmp_path: Path) -> None:
    # Root over symptom: the checkpoint is what was lost, the full filesystem is why.
    write(tmp_path / "node0" / "train.log", [
        f"{ts(T0)} saving checkpoint at iteration 1000 to /fsx/checkpoints",
        f"{ts(T0)} OSError: [Errno 28] No space left on device",
    ])
    assert first_incident(tmp_path) == (Category.STORAGE_IO, Action.CHECK_STORAGE)


def test_storage_error_after_the_save_finished_stays_storage(tmp_path: Path) -> None:
    write(tmp_path / "node0" / "train.log", [
        f"{ts(T0)} saving checkpoint at iteration 1000 to /fsx/checkpoints",
        f"{ts(T0)} successfully saved checkpoint at iteration 1000 to /fsx/checkpoints",
        f"{ts(T0)} OSError: [Errno 28] No space left on device",
    ])
    assert first_incident(tmp_path) == (Category.STORAGE_IO, Action.CHECK_STORAGE)


def test_storage_error_raised_inside_torch_save_stays_the_storage_root(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 88, in save_checkpoint',
        "    torch.save(state, path)",
        '  File "/usr/lib/python3/site-packages/torch/serialization.py", line 379, in save',
        "    _save(obj, opened_zipfile, pickle_module, pickle_protocol)",
        "OSError: [Errno 5] Input/output error",
    ])
    assert first_incident(tmp_path) == (Category.STORAGE_IO, Action.CHECK_STORAGE)


def test_a_short_write_of_the_zip_writer_is_storage_not_checkpoint(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 88, in save_checkpoint',
        "    torch.save(state, path)",
        "RuntimeError: [enforce fail at inline_container.cc:600] . PytorchStreamWriter failed "
        "writing file data/7: file write failed",
    ])
    assert first_incident(tmp_path) == (Category.STORAGE_IO, Action.CHECK_STORAGE)


def test_a_file_error_inside_torch_save_is_still_a_checkpoint_failure(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 88, in save_checkpoint',
        "    torch.save(state, path)",
        '  File "/usr/lib/python3/site-packages/torch/serialization.py", line 379, in save',
        "    with _open_zipfile_writer(f) as opened_zipfile:",
        "FileNotFoundError: [Errno 2] No such file or directory: '/runs/exp4/step_200/model.pt'",
    ])
    assert first_incident(tmp_path)[0] is Category.CHECKPOINT


def test_storage_error_in_other_code_stays_storage(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "Traceback (most recent call last):",
        '  File "/workspace/data.py", line 57, in read_shard',
        "    return f.read()",
        "OSError: [Errno 5] Input/output error",
    ])
    assert first_incident(tmp_path)[0] is Category.STORAGE_IO


def test_missing_file_in_a_checkpoint_directory_is_a_checkpoint_problem(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'./out/checkpoint-1000/trainer_state.json'"])
    assert first_incident(tmp_path)[0] is Category.CHECKPOINT


def test_collective_timeout_while_this_rank_is_still_saving_is_a_stalled_save(
        tmp_path: Path) -> None:
    write(tmp_path / "node0" / "rank0.log", [
        f"[rank0]: {ts(T0)} saving checkpoint at iteration 1000 to /fsx/checkpoints",
        watchdog(T0 + timedelta(minutes=10), 0),
    ])
    write(tmp_path / "node1" / "rank8.log", [watchdog(T0 + timedelta(minutes=10), 8)])
    assert first_incident(tmp_path) == (Category.CHECKPOINT, Action.CHECK_STORAGE)


def test_collective_timeout_after_a_finished_save_is_a_hang(tmp_path: Path) -> None:
    write(tmp_path / "node0" / "rank0.log", [
        f"[rank0]: {ts(T0)} saving checkpoint at iteration 1000 to /fsx/checkpoints",
        f"[rank0]: {ts(T0)} successfully saved checkpoint at iteration 1000 to /fsx/checkpoints",
        watchdog(T0 + timedelta(minutes=10), 0),
    ])
    assert first_incident(tmp_path)[0] is Category.NCCL_TIMEOUT_HANG


# --- loss-scale runs ---------------------------------------------------------------------------

def apex(scale: float) -> str:
    return f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {scale}"


def test_overflows_driving_the_scale_down_step_after_step_are_numerical(tmp_path: Path) -> None:
    write(tmp_path / "train.log", [apex(s) for s in (1024.0, 512.0, 256.0, 128.0, 64.0)])
    rules = load_rules()
    events, _ = scan_paths([str(tmp_path)], rules)
    assert [e.signature for e in events][-2:] == [LOSS_SCALE_RUN_SIGNATURE] * 2
    incidents = correlate(events, rules)
    assert [(i.category, i.action) for i in incidents] == [
        (Category.NUMERICAL_NAN, Action.FIX_CONFIG)]


@pytest.mark.parametrize("scales", [
    (65536.0, 32768.0, 16384.0, 8192.0, 4096.0, 2048.0),  # start-up search: stays high
    (1024.0, 512.0, 1024.0, 512.0, 1024.0, 512.0),  # recovers in between
    (512.0,),  # a single overflow
], ids=["startup-search", "recovering", "single"])
def test_benign_overflow_patterns_are_not_incidents(tmp_path: Path,
                                                   scales: tuple[float, ...]) -> None:
    write(tmp_path / "train.log", [apex(s) for s in scales])
    rules = load_rules()
    events, _ = scan_paths([str(tmp_path)], rules)
    assert correlate(events, rules) == []


# --- network errors after a hang; collective mismatches ----------------------------------------

STORE_RESET = ('[W501 {t:%H:%M:%S}.000000000 ProcessGroupNCCL.cpp:1771] [PG ID 0 PG GUID 0 '
               'Rank {r}] Failed to check the "should dump" flag on TCPStore, (maybe TCPStore '
               'server has shut down too early), with error: Connection reset by peer')


def test_store_errors_after_the_timeouts_are_teardown_not_the_cause(tmp_path: Path) -> None:
    t = T0 + timedelta(minutes=10)
    for r in range(4):
        write(tmp_path / "node0" / f"rank{r}.log", [
            watchdog(t, r),
            f"[rank{r}]:" + STORE_RESET.format(t=t + timedelta(seconds=5), r=r),
        ])
    assert first_incident(tmp_path) == (Category.NCCL_TIMEOUT_HANG, Action.RESTART_JOB)


def test_transport_error_before_the_timeout_is_the_cause(tmp_path: Path) -> None:
    write(tmp_path / "node0" / "rank0.log", [
        f"node0:1234:1240 [0] {ts(T0)} NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.2<59343> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        watchdog(T0 + timedelta(minutes=10), 0),
    ])
    assert first_incident(tmp_path)[0] is Category.NETWORK_IB


def test_ranks_stuck_in_different_collectives_are_a_code_bug(tmp_path: Path) -> None:
    t = T0 + timedelta(minutes=10)
    write(tmp_path / "node0" / "rank0.log", [watchdog(t, 0, seq=7219, numel=64)])
    write(tmp_path / "node0" / "rank1.log", [watchdog(t, 1, seq=7219, numel=24084544)])
    assert first_incident(tmp_path) == (Category.USER_CODE_ERROR, Action.FIX_CODE)


@pytest.mark.parametrize(("seq1", "numel1", "pg1"), [
    (7219, 64, ""),  # same call everywhere: an ordinary hang
    (7219, 99, "3"),  # same number on different process groups: different calls
], ids=["same-call", "other-process-group"])
def test_agreeing_ranks_are_an_ordinary_hang(tmp_path: Path, seq1: int, numel1: int,
                                             pg1: str) -> None:
    t = T0 + timedelta(minutes=10)
    write(tmp_path / "node0" / "rank0.log", [watchdog(t, 0, seq=7219, numel=64, pg="0" if pg1
                                                      else "")])
    write(tmp_path / "node0" / "rank1.log", [watchdog(t, 1, seq=seq1, numel=numel1, pg=pg1)])
    assert first_incident(tmp_path)[0] is Category.NCCL_TIMEOUT_HANG
