"""Injections recorded by `trainguard inject` and read back by the supervisor; which frame of a
hung rank is the job's own code."""

from __future__ import annotations

import signal
from pathlib import Path

import trainguard
from trainguard.faultspec import parse_fault
from trainguard.recover.drills import injection_of
from trainguard.recover.hangcause import job_files, job_frame
from trainguard.recover.inject import Firing
from trainguard.recover.injected import (
    Injection,
    attempt_injections,
    explains_exit,
    explains_stop,
    injections_path,
    read_injections,
    record_injection,
)


def test_recorded_injections_read_back_for_their_attempt(tmp_path: Path) -> None:
    path = injections_path(tmp_path, 1)
    assert path == tmp_path / "attempts" / "1" / "injected.jsonl"
    assert read_injections(path) == []
    kill = Injection("kill", 1, "node2", "trainguard inject", 12.5)
    record_injection(path, kill)
    with path.open("a") as f:
        f.write("not json\n{\"kind\": \"bogus\"}\n{\"kind\": \"kill\", \"rank\": \"1\"}\n")
    record_injection(path, Injection("xid", None, "node2"))
    assert read_injections(path) == [kill, Injection("xid", None, "node2")]
    assert read_injections(injections_path(tmp_path, 0)) == []


def test_attempt_injections_gathers_drills_requests_and_sdk_faults(tmp_path: Path) -> None:
    record_injection(injections_path(tmp_path, 0), Injection("kill", 0, "n1"))
    drilled = [Injection("hang", 1, "n1", "--inject hang:rank=1")]
    found = attempt_injections(drilled, tmp_path, 0,
                               {2: ("n2", ["exception:step=5", "garbage"])})
    assert [(i.kind, i.rank, i.source) for i in found] == [
        ("hang", 1, "--inject hang:rank=1"), ("kill", 0, "trainguard inject"),
        ("exception", 2, "--inject exception:step=5")]


def test_a_fired_drill_is_an_injection_of_its_rank_or_node() -> None:
    kill = injection_of(Firing(parse_fault("kill:rank=3,after=1"), 3, "node2"), 7.0)
    assert (kill.kind, kill.rank, kill.node, kill.time) == ("kill", 3, "node2", 7.0)
    assert kill.describe() == "injected kill of rank 3 (--inject kill:rank=3,after=1)"
    xid = injection_of(Firing(parse_fault("xid:node=node2,xid=79"), None, "node2"), 7.0)
    assert (xid.rank, xid.node) == (None, "node2")


def test_only_the_matching_exit_is_explained() -> None:
    kill = Injection("kill", 1, "n1")
    assert explains_exit([kill], 1, -signal.SIGKILL) == kill
    assert explains_exit([kill], 1, -signal.SIGSEGV) is None
    assert explains_exit([kill], 0, -signal.SIGKILL) is None
    assert explains_exit([kill], 1, 0) is None
    assert explains_stop([kill], 1) is None
    assert explains_stop([Injection("hang", 1, "n1")], 1) is not None


PYSPY = ("_fault (quiet_ddp.py:36)", "main (quiet_ddp.py:60)", "<module> (quiet_ddp.py:80)")
PYSPY_TORCH = ("all_reduce (torch/distributed/distributed_c10d.py:3252)",
               "main (quiet_ddp.py:60)")


def test_the_jobs_own_frames_are_told_from_a_librarys(tmp_path: Path) -> None:
    script = tmp_path / "quiet_ddp.py"
    script.write_text("")
    is_job = job_files(("python", "quiet_ddp.py", "--steps", "3"), tmp_path)
    assert job_frame(PYSPY, is_job) == "quiet_ddp.py:36 in _fault"
    assert job_frame(PYSPY_TORCH, is_job) is None  # innermost: torch, not the job
    faulthandler = (f'File "{script}", line 12 in slow_io',)
    assert job_frame(faulthandler, is_job) == "quiet_ddp.py:12 in slow_io"
    assert job_frame(('File "/usr/lib/python3/site-packages/x/y.py", line 1 in f',),
                     is_job) is None
    assert job_frame((), is_job) is None
    # a command without a script of its own (python -m pkg): nothing is the job's for sure
    assert job_frame(PYSPY, job_files(("python", "-m", "pkg"), tmp_path)) is None


def test_trainguards_own_frames_are_never_the_jobs(tmp_path: Path) -> None:
    sdk = Path(trainguard.__file__).resolve().parent
    # a "script" whose directory holds trainguard's own code: the SDK is still not the job's
    # code (an injected slowdown sleeps in it)
    is_job = job_files(("python", str(sdk / "__init__.py")), tmp_path)
    frame = f'File "{sdk / "train" / "session.py"}", line 230 in step'
    assert job_frame((frame,), is_job) is None
    assert job_frame(("step (trainguard/train/session.py:230)",), is_job) is None
