"""Exit statuses and signals (signals.py): every form of one signal reads the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from rule_forms import first_answer

from trainguard.evidence.signals import signal_cause, signal_number, signal_of_status
from trainguard.taxonomy import Action, Category


@pytest.mark.parametrize(("status", "signal"), [
    (137, 9), (139, 11), (134, 6), (135, 7), (143, 15), (-9, 9), (-6, 6), (-11, 11),
    (0, None), (1, None), (2, None), (127, None), (128, None), (255, None), (-100, None),
])
def test_exit_status_names_its_signal(status: int, signal: int | None) -> None:
    assert signal_of_status(status) == signal


@pytest.mark.parametrize(("name", "signal"), [
    ("SIGKILL", 9), ("KILL", 9), ("Killed", 9), ("Segmentation fault", 11), ("SIGSEGV", 11),
    ("Aborted", 6), ("Bus error", 7), ("Terminated", 15), ("6", 6), ("SIGNOPE", None),
    ("99", None),
])
def test_signal_names(name: str, signal: int | None) -> None:
    assert signal_number(name) == signal


def test_signals_that_say_nothing_of_the_cause_give_no_hint() -> None:
    assert signal_cause(2) is None  # SIGINT: someone pressed Ctrl-C
    assert signal_cause(None) is None
    assert signal_cause(9) is not None and signal_cause(9).action is Action.FIX_CONFIG


# The named form of each signal as the rules read it, then the numeric forms a launcher, a shell,
# a container runtime or mpirun prints for the same death.
NAMED = {
    9: "srun: error: node7: task 3: Killed",
    11: "Segmentation fault (core dumped)",
    6: "Aborted (core dumped)",
    7: "Bus error (core dumped)",
    15: "Received SIGTERM, shutting down",
    4: "Illegal instruction (core dumped)",
    8: "Floating point exception (core dumped)",
}
NUMERIC = [
    "Error: container trainer exited with code {status}",
    "[Modelarts Service Log]Training end with return code: {status}",
    "task 0 (pid 4242) exited with exit code {status}",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -{signal}) "
    "local_rank: 0 (pid: 4242) of binary: /usr/bin/python3",
    "mpirun noticed that process rank 3 with PID 0 on node n01 exited on signal {signal}.",
]


@pytest.mark.parametrize("signal", sorted(NAMED))
@pytest.mark.parametrize("form", NUMERIC)
def test_every_form_of_a_signal_reads_as_its_named_form(tmp_path: Path, signal: int,
                                                        form: str) -> None:
    named, _, _ = first_answer(tmp_path, [NAMED[signal]])
    numeric, _, _ = first_answer(tmp_path, [form.format(status=128 + signal, signal=signal)])

    assert named is not Category.UNKNOWN
    assert numeric is named


@pytest.mark.parametrize("line", [
    "Error: container trainer exited with code 3",
    "Training end with return code: 0",
    "Process finished with exit code 1",
])
def test_an_ordinary_exit_code_is_not_read_as_a_signal(tmp_path: Path, line: str) -> None:
    _, _, signature = first_answer(tmp_path, [line])
    assert signature != "exit_status"


def test_a_watchdog_abort_does_not_outrank_the_timeout_it_follows(tmp_path: Path) -> None:
    category, _, _ = first_answer(tmp_path, [
        "[E ProcessGroupNCCL.cpp:821] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800963 "
        "milliseconds before timing out.",
        "ERROR:launcher:Rank 1 crashed with exit code -6.",
        "Global rank 0 (PID 786) exited with code 134",
    ])
    assert category is Category.NCCL_TIMEOUT_HANG


def test_a_sigkill_exit_status_still_names_the_oom_killer_over_a_python_error(
        tmp_path: Path) -> None:
    # SIGKILL is no teardown signal here: the kernel sent it, the Python errors follow it.
    category, _, _ = first_answer(tmp_path, [
        "  exitcode  : -9 (pid: 48211)",
        "RuntimeError: DataLoader worker exited",
    ])
    assert category is Category.OOM_HOST


@pytest.mark.parametrize("line", [
    "free(): double free detected in tcache 2",
    "free(): invalid pointer",
    "malloc(): corrupted top size",
    "munmap_chunk(): invalid pointer",
    "double free or corruption (out)",
    "corrupted size vs. prev_size",
    "*** stack smashing detected ***: terminated",
    "Fatal Python error: Aborted",
])
def test_glibc_heap_aborts_are_native_crashes(tmp_path: Path, line: str) -> None:
    category, _, signature = first_answer(tmp_path, [line])
    assert (category, signature) == (Category.CUDA_SOFTWARE_BUG, "segfault")


@pytest.mark.parametrize("line", [
    "malloc(): allocating 12 bytes",
    "free(): called from the pool allocator",
    "INFO: stack smashing protection enabled",
])
def test_heap_look_alikes_are_not_crashes(tmp_path: Path, line: str) -> None:
    _, _, signature = first_answer(tmp_path, [line])
    assert signature != "segfault"
