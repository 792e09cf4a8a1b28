"""Fencing through Slurm (issue 26): when a host is lost, the agents' step (allocation mode)
or job (submit mode) is killed before the relaunch, and the controller waits until it is gone."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from trainguard.recover.slurm import SlurmCommands
from trainguard.recover.slurm.agents import SlurmLauncher, SrunAgents
from trainguard.recover.slurm.backend import SlurmBackend


class Slurm:
    """A fake of the Slurm tools: one allocation (job 77) with steps, or submitted jobs."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.steps = {"77.0": "trainguard", "77.3": "tg-agents-0-abc"}
        self.jobs = {"90": "RUNNING"}
        self.srun: subprocess.Popen[bytes] | None = None

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        out = ""
        if argv[0] == "squeue":
            out = "".join(f"{s}|{n}\n" for s, n in self.steps.items())
        elif argv[0] == "scancel" and "--signal=KILL" in argv:
            target = argv[-1]
            self.steps.pop(target, None)
            if target in self.jobs:
                self.jobs[target] = "CANCELLED"
            if self.srun is not None and target == "77.3":
                self.srun.kill()  # srun ends with its step
        elif argv[:3] == ["scontrol", "show", "job"]:
            out = f"JobId={argv[-1]} JobState={self.jobs.get(argv[-1], 'COMPLETED')}\n"
        return subprocess.CompletedProcess(argv, 0, out, "")


@pytest.fixture
def slurm() -> Slurm:
    return Slurm()


@pytest.fixture
def backend(slurm: Slurm, request: pytest.FixtureRequest) -> Iterator[SlurmBackend]:
    mode = getattr(request, "param", "allocation")
    b = SlurmBackend(mode, SlurmCommands(runner=slurm), env={"SLURM_JOB_ID": "77"})
    yield b
    b.close()


def test_kill_and_steps_named_argv(slurm: Slurm) -> None:
    commands = SlurmCommands(runner=slurm)
    assert commands.steps_named("77", "tg-agents-0-abc") == ["77.3"]
    commands.kill("77.3")
    commands.kill("90")
    assert ["scancel", "--signal=KILL", "77.3"] in slurm.calls
    assert ["scancel", "77.3"] in slurm.calls
    assert ["scancel", "--signal=KILL", "--full", "90"] in slurm.calls


@pytest.mark.parametrize("backend", ["allocation"], indirect=True)
def test_a_lost_host_cancels_the_agents_step_before_the_relaunch(
        slurm: Slurm, backend: SlurmBackend) -> None:
    srun = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    slurm.srun = srun
    agents = SrunAgents(backend, ("host1", "host2"), srun, None, "tg-agents-0-abc")
    agents.fence(("host2",))
    assert agents.fenced == ["77.3"]
    assert "77.3" not in slurm.steps and "77.0" in slurm.steps  # the step, not the others
    assert srun.poll() is not None  # waited until the step (and so srun) was gone
    agents.close(0.0)


@pytest.mark.parametrize("backend", ["submit"], indirect=True)
def test_a_lost_host_cancels_the_agents_job_in_submit_mode(
        slurm: Slurm, backend: SlurmBackend) -> None:
    agents = SrunAgents(backend, ("host1", "host2"), None, "90")
    agents.fence(("host2",))
    assert agents.fenced == ["90"]
    assert slurm.jobs["90"] == "CANCELLED"
    assert agents.exited() == {"host1": 1, "host2": 1}
    agents.close(0.0)


@pytest.mark.parametrize("backend", ["allocation"], indirect=True)
def test_the_agents_step_gets_a_unique_name(slurm: Slurm, backend: SlurmBackend,
                                            tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    real_popen = subprocess.Popen

    def popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        seen.append(argv)
        return real_popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(subprocess, "Popen", popen)
    agents = SlurmLauncher(backend).start(("host1",), lambda n: ["agent"], {}, tmp_path, 3)
    monkeypatch.undo()
    names = [a for a in seen[0] if a.startswith("--job-name=")]
    assert names and names[0].startswith("--job-name=tg-agents-3-")
    agents.close(1.0)


@pytest.mark.parametrize("backend", ["allocation"], indirect=True)
def test_a_step_that_cannot_be_found_does_not_hold_the_relaunch(
        slurm: Slurm, backend: SlurmBackend) -> None:
    srun = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        agents = SrunAgents(backend, ("host1",), srun, None, "tg-agents-9-none",
                            sleep=lambda s: pytest.fail("waited for a step it did not cancel"))
        agents.fence(("host1",))
        assert agents.fenced == []
    finally:
        srun.kill()
        srun.wait()


def test_stopping_an_attempt_kills_its_step_through_slurm_not_only_srun(
        slurm: Slurm, tmp_path: Path) -> None:
    """Without agents (allocation mode): a rank's step is SIGKILLed through Slurm when the
    attempt is stopped, so a task srun cannot stop (a stopped rank, a lost host) dies too."""
    from trainguard.recover.launchplan import LaunchPlan, RankLaunch
    from trainguard.recover.slurm.backend import SlurmAttempt
    from trainguard.recover.slurm.task import step_file

    attempt_dir = tmp_path / "attempts" / "0"
    plan = LaunchPlan(0, ("train",), ("host1",),
                      (RankLaunch(0, 0, "host1", 0, {}, attempt_dir / "host1" / "rank0.log"),),
                      tmp_path)
    attempt_dir.mkdir(parents=True)
    step_file(attempt_dir).write_text("77.5\n")
    srun = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                             "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
                             "time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert srun.stdout is not None
        srun.stdout.readline()  # SIGTERM is ignored from now on, as by a stuck srun
        handle = SlurmAttempt(plan, attempt_dir, srun=srun,
                              commands=SlurmCommands(runner=slurm))
        handle.stop(0.3)
        assert ["scancel", "--signal=KILL", "77.5"] in slurm.calls
        assert srun.poll() is not None
    finally:
        if srun.poll() is None:
            srun.kill()
        srun.wait()
