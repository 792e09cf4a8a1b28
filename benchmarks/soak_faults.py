"""Soak of issue 26's acceptance: each fault, repeated, on the namespaced multi-host cluster.

Every run is an ordinary DDP job (``tests/integration/scripts/plain_ddp.py``, no SDK) on 3 of
4 namespaced hosts (host4 is the spare), supervised by ``trainguard run`` in the root namespace;
the fault is made inside a host, as the multi-host acceptance tests make it (their helpers are
imported, not copied). Per fault and backend the table counts the runs recovered in exactly one
relaunch (status succeeded, 2 attempts, the expected host excluded), the runs whose final loss
equals the fault-free run's, and the seconds from the fault to the first step after the resume
(read from the controller's mirror of rank 0's output). "controller" kills the controller
instead: nothing is relaunched, and the check is that no rank and no agent is left on any host
(its seconds: until the last one was gone).

    sudo .venv/bin/python benchmarks/soak_faults.py --repeats 10 --backend both
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCAL_FAULTS = ("kill", "xid", "stop", "lost", "fenced", "controller")
SLURM_FAULTS = ("kill", "lost")
BACKENDS = ("local", "slurm", "both")
HOSTS = ("host1", "host2", "host3", "host4")
EXCLUDED = {"kill": (), "stop": (), "xid": ("host2",), "lost": ("host2",),
            "fenced": ("host2",)}
"""The hosts a recovered run must have excluded, per fault."""
HANG_TIMEOUT_S = 8.0
NODE_TIMEOUT_S = 6.0
FAULT_STEP = 12
RUN_TIMEOUT_S = 300.0


class SoakError(Exception):
    """The soak cannot run (not root, no namespaces, a missing program, the cluster failed)."""


# ---- pure: outcomes, aggregation, table ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One faulted run. ``recovered``: in exactly one relaunch (controller: no rank left);
    ``loss_equal``: None where there is no loss to compare."""

    fault: str
    backend: str
    recovered: bool
    loss_equal: bool | None
    resume_s: float | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Row:
    fault: str
    backend: str
    runs: int
    recovered: int
    loss_equal: int
    loss_compared: int
    median_s: float | None
    max_s: float | None
    failures: tuple[str, ...]


def judge(fault: str, summary: dict[str, Any]) -> str:
    """Why a run's summary is not "recovered in exactly one relaunch" ("" when it is)."""
    status = summary.get("status")
    attempts = summary.get("attempts") or []
    problems = []
    if status != "succeeded":
        problems.append(f"status {status}")
    if len(attempts) != 2:
        failures = [str((a.get("failure") or {}).get("kind", a.get("status", "?")))
                    for a in attempts[:-1]]
        problems.append(f"{len(attempts)} attempts ({', '.join(failures) or 'none failed'})")
    excluded = tuple(str(e.get("node")) for e in summary.get("exclusions") or [])
    if fault in EXCLUDED and excluded != EXCLUDED[fault]:
        problems.append(f"excluded {list(excluded)}, expected {list(EXCLUDED[fault])}")
    return "; ".join(problems)


def aggregate(outcomes: Sequence[Outcome]) -> list[Row]:
    """One row per (fault, backend), in the order first seen."""
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.fault, o.backend), []).append(o)
    rows = []
    for (fault, backend), group in groups.items():
        times = [o.resume_s for o in group if o.resume_s is not None]
        rows.append(Row(
            fault, backend, len(group), sum(o.recovered for o in group),
            sum(o.loss_equal is True for o in group),
            sum(o.loss_equal is not None for o in group),
            statistics.median(times) if times else None, max(times) if times else None,
            tuple(f"run {i + 1}: {o.reason}" for i, o in enumerate(group) if o.reason)))
    return rows


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(rows: Sequence[Row]) -> str:
    head = ("fault", "backend", "runs", "one relaunch", "fault-free loss", "median s", "max s")
    lines = [[r.fault, r.backend, str(r.runs), f"{r.recovered}/{r.runs}",
              f"{r.loss_equal}/{r.loss_compared}" if r.loss_compared else "n/a",
              _s(r.median_s), _s(r.max_s)] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=False)]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
           for line in (list(head), *lines)]
    for r in rows:
        out += [f"  {r.fault}/{r.backend} {f}" for f in r.failures]
    out.append('("controller": one relaunch = no rank or agent left on any host; '
               "seconds = until the last was gone)")
    return "\n".join(out)


def all_recovered(rows: Sequence[Row]) -> bool:
    return all(r.recovered == r.runs and r.loss_equal == r.loss_compared for r in rows)


# ---- options -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    repeats: int
    faults: tuple[str, ...]
    backend: str
    steps: int
    json: bool


def parse_args(argv: Sequence[str] | None) -> Config:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10, help="runs per fault and backend")
    ap.add_argument("--faults", default=",".join(LOCAL_FAULTS),
                    help=f"comma list of {', '.join(LOCAL_FAULTS)} (Slurm: "
                         f"{', '.join(SLURM_FAULTS)} only)")
    ap.add_argument("--backend", choices=BACKENDS, default="local")
    ap.add_argument("--steps", type=int, default=60,
                    help="steps per run (0.2 s each; the relaunch outlasts the hang timeout)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args(argv)
    faults = tuple(f.strip() for f in a.faults.split(",") if f.strip())
    unknown = [f for f in faults if f not in LOCAL_FAULTS]
    if unknown or not faults:
        ap.error(f"--faults: unknown {', '.join(unknown) or '(none given)'}; "
                 f"choose from {', '.join(LOCAL_FAULTS)}")
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    if a.steps < FAULT_STEP + 20:
        ap.error(f"--steps must be >= {FAULT_STEP + 20}")
    return Config(a.repeats, tuple(dict.fromkeys(faults)), a.backend, a.steps, a.json)


def plan(cfg: Config, slurm_ok: bool) -> list[tuple[str, str]]:
    """(backend, fault) pairs to run, each ``cfg.repeats`` times."""
    out = []
    if cfg.backend in ("local", "both"):
        out += [("local", f) for f in cfg.faults]
    if cfg.backend in ("slurm", "both") and slurm_ok:
        out += [("slurm", f) for f in cfg.faults if f in SLURM_FAULTS]
    return out


# ---- the cluster ---------------------------------------------------------------------------


def _helpers() -> Any:
    """The integration tests' job helpers (``multihost_job``), as bench_agents_cluster uses."""
    for p in (ROOT, ROOT / "tests" / "integration"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    import multihost_job  # type: ignore[import-not-found]  # a test helper

    return multihost_job


def require(slurm: bool) -> None:
    from trainguard.devcluster import missing_requirements
    from trainguard.devcluster.common import SLURM_PROGRAMS

    if os.geteuid() != 0:
        raise SoakError("the namespaced cluster needs root (run with sudo)")
    missing = missing_requirements() + (missing_requirements(SLURM_PROGRAMS) if slurm else [])
    if missing:
        raise SoakError(f"the namespaced cluster needs: {', '.join(missing)}")


class Runner:
    """Runs faulted jobs on one started cluster; ``job_kw`` selects the backend."""

    def __init__(self, cluster: Any, work: Path, backend: str, job_kw: dict[str, Any],
                 steps: int, after: Callable[[], None] = lambda: None) -> None:
        self.mj = _helpers()
        self.c, self.work, self.backend, self.job_kw = cluster, work, backend, job_kw
        self.steps, self.after, self.n = steps, after, 0
        self.marker = self.mj.SCRIPT.name

    def _job(self, name: str, extra: Sequence[str], steps: int | None = None) -> Any:
        self.n += 1
        return self.mj.Job(self.c, self.work, f"{self.backend}-{name}-{self.n}",
                           steps=steps or self.steps, extra=list(extra), **self.job_kw)

    def baseline(self) -> float:
        job = self._job("baseline", ["--hang-timeout", f"{HANG_TIMEOUT_S:g}"])
        try:
            summary = job.wait(timeout_s=RUN_TIMEOUT_S)
        except AssertionError as exc:
            raise SoakError(f"the fault-free {self.backend} run did not end: {exc}") from None
        finally:
            self._clean(job)
        if summary.get("status") != "succeeded" or len(summary.get("attempts") or []) != 1:
            raise SoakError(f"the fault-free {self.backend} run did not succeed in one attempt "
                            f"({judge('kill', summary) or summary.get('status')}):\n"
                            f"{job.output()[-2000:]}")
        return float(job.final_loss())

    def once(self, fault: str, baseline: float) -> Outcome:
        if fault == "controller":
            return self._controller()
        extra = ["--hang-timeout", f"{HANG_TIMEOUT_S:g}"] if fault in ("kill", "xid", "stop") \
            else ["--node-timeout", f"{NODE_TIMEOUT_S:g}", "--hang-timeout", "60"]
        job = self._job(fault, extra)
        notes: list[str] = []
        try:
            try:
                job.wait_for_step(FAULT_STEP, timeout_s=180)
            except AssertionError as exc:
                return Outcome(fault, self.backend, False, None, None,
                               f"never reached step {FAULT_STEP}: {_tail(str(exc))}")
            t_fault = time.monotonic()
            self._inject(fault, job, notes)
            t_resume, ended = _follow(job, RUN_TIMEOUT_S)
            if not ended:
                return Outcome(fault, self.backend, False, None, _dt(t_resume, t_fault),
                               f"did not end within {RUN_TIMEOUT_S:g} s: "
                               f"{_tail(job.output())}")
            try:
                summary = json.loads((job.run_dir / "summary.json").read_text())
            except (OSError, ValueError) as exc:
                return Outcome(fault, self.backend, False, None, _dt(t_resume, t_fault),
                               f"no summary.json ({exc}): {_tail(job.output())}")
            why = "; ".join(filter(None, [judge(fault, summary), *notes]))
            try:
                loss_equal: bool | None = float(job.final_loss()) == baseline
            except (OSError, ValueError):
                loss_equal = None
            reason = "; ".join(filter(None, [
                why, "" if loss_equal else f"final loss {_loss(job)} != fault-free {baseline}"]))
            if reason:
                reason += f" [{job.run_dir / 'summary.json'}]"
            return Outcome(fault, self.backend, not why, loss_equal, _dt(t_resume, t_fault),
                           reason)
        finally:
            self._clean(job, fault)

    def _inject(self, fault: str, job: Any, notes: list[str]) -> None:
        c, mj = self.c, self.mj
        if fault == "kill":
            c.run("host2", ["pkill", "-KILL", "-f", self.marker], check=True)
        elif fault == "stop":
            c.run("host3", ["pkill", "-STOP", "-f", self.marker], check=True)
        elif fault == "xid":
            c.run("host2", ["sh", "-c", f"echo '{mj.XID79}' >> /var/log/kern.log"], check=True)
        elif fault == "lost":
            c.link_down("host2")
            _until(lambda: "node lost" in job.output() or job.proc.poll() is not None,
                   NODE_TIMEOUT_S + 60)
            c.link_up("host2")
        elif fault == "fenced":
            c.run("host2", ["pkill", "-STOP", "-f", "trainguard.agent"], check=True)
            _until(lambda: "attempt 1: launching" in job.output()
                   or job.proc.poll() is not None, NODE_TIMEOUT_S + 60)
            left = {m: mj.rank_pids(c, "host2", m) for m in (self.marker, "trainguard.agent")}
            if any(left.values()):
                notes.append(f"not fenced at the relaunch: host2 still runs {left}")

    def _controller(self) -> Outcome:
        job = self._job("controller", [], steps=400)
        try:
            try:
                job.wait_for_step(5, timeout_s=180)
            except AssertionError as exc:
                return Outcome("controller", self.backend, False, None, None,
                               f"never reached step 5: {_tail(str(exc))}")
            running = {h: self.mj.rank_pids(self.c, h, self.marker) for h in HOSTS[:3]}
            if not all(running.values()):
                return Outcome("controller", self.backend, False, None, None,
                               f"not every host ran a rank before the kill: {running}")
            t0 = time.monotonic()
            job.kill()  # SIGKILL to the controller's process group, as the tests do
            gone = _until(lambda: not self._left(), 30)
            left = self._left()
            return Outcome("controller", self.backend, not left, None,
                           time.monotonic() - t0 if gone else None,
                           f"left after 30 s: {left}" if left else "")
        finally:
            self._clean(job)

    def _left(self) -> dict[str, list[int]]:
        found = {f"{h} {m}": self.mj.rank_pids(self.c, h, m)
                 for h in HOSTS for m in (self.marker, "trainguard.agent")}
        return {k: v for k, v in found.items() if v}

    def _clean(self, job: Any, fault: str = "") -> None:
        """Whatever a run left: the controller, the fault's traces, leftover processes."""
        job.kill()
        with contextlib.suppress(Exception):
            self.c.link_up("host2")
        if fault == "xid":
            self.c.run("host2", ["sh", "-c", ": > /var/log/kern.log"])
        from benchmarks.bench_agents_cluster import kill_leftovers

        kill_leftovers(self.c, [self.marker.encode(), b"trainguard.agent"])
        self.after()


def _until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return done()


def _follow(job: Any, timeout_s: float) -> tuple[float | None, bool]:
    """Until the run ends: when the first step after a resume showed in rank 0's mirror of
    attempt 1, and whether the run ended in time."""
    from benchmarks.bench_agents import first_step_after_resume

    mirror = job.run_dir / "attempts" / "1" / "host1" / "rank0.log"
    deadline, seen = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        ended = job.proc.poll() is not None
        if seen is None:
            with contextlib.suppress(OSError):
                if first_step_after_resume(mirror.read_text(errors="replace")) is not None:
                    seen = time.monotonic()
        if ended:
            return seen, True
        time.sleep(0.1)
    return seen, False


def _loss(job: Any) -> str:
    try:
        return str(job.final_loss())
    except (OSError, ValueError):
        return "missing"


def _dt(t: float | None, t0: float) -> float | None:
    return None if t is None else t - t0


def _tail(text: str) -> str:
    return " | ".join(x.strip()[:200] for x in text.strip().splitlines()[-3:])


@contextlib.contextmanager
def backend_runner(backend: str, cfg: Config) -> Iterator[Runner]:
    """A started cluster (Slurm's over it for ``slurm``) and its runner; all stopped after."""
    from trainguard.devcluster import HostCluster, SlurmHostCluster

    work = Path(tempfile.mkdtemp(prefix=f"soak-{backend}-"))
    old = os.getcwd()
    os.chdir(ROOT)  # the enter script runs commands in the caller's directory
    try:
        if backend == "local":
            with HostCluster(4, work / "cluster") as c:
                yield Runner(c, work, backend, {}, cfg.steps)
        else:
            with SlurmHostCluster(4, work / "cluster") as s:
                wrapper = ["salloc", "-N4", "--no-kill", f"--nodelist={','.join(HOSTS)}", "--"]
                kw = {"env": s.env(), "wrapper": wrapper,
                      "backend": ["--backend", "slurm", "--slurm-mode", "allocation"]}

                def resume() -> None:
                    s.run(["scontrol", "update", "nodename=host2", "state=resume"])

                yield Runner(s.cluster, work, backend, kw, cfg.steps, after=resume)
    finally:
        os.chdir(old)
        shutil.rmtree(work, ignore_errors=True)


# ---- main ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """0: every fault recovered in exactly one relaunch with the fault-free loss; 1: not;
    2: the soak could not run."""
    cfg = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from trainguard.errors import TrainguardError

    outcomes: list[Outcome] = []
    notes: list[str] = []
    t0 = time.monotonic()
    try:
        require(slurm=cfg.backend == "slurm")
        slurm_ok = True
        if cfg.backend == "both":
            try:
                require(slurm=True)
            except SoakError as exc:
                slurm_ok = False
                notes.append(f"Slurm skipped: {exc}")
        todo = plan(cfg, slurm_ok)
        for backend in dict.fromkeys(b for b, _ in todo):
            with backend_runner(backend, cfg) as runner:
                base = runner.baseline()
                _progress(f"{backend}: fault-free loss {base}")
                for b, fault in todo:
                    for i in range(cfg.repeats if b == backend else 0):
                        o = runner.once(fault, base)
                        outcomes.append(o)
                        _progress(f"{backend} {fault} #{i + 1}: "
                                  f"{'ok' if o.recovered else 'FAILED'} "
                                  f"{_s(o.resume_s)} s {o.reason}")
    except (SoakError, TrainguardError) as exc:
        print(f"soak_faults: {exc}", file=sys.stderr)
        if not outcomes:
            return 2
        notes.append(f"stopped early: {exc}")
    except KeyboardInterrupt:
        notes.append("interrupted")
    rows = aggregate(outcomes)
    wall = time.monotonic() - t0
    if cfg.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "notes": notes,
                          "wall_s": round(wall, 1)}, indent=2))
    else:
        print(render(rows))
        for n in notes:
            print(n)
        print(f"wall time {wall:.0f} s")
    return 0 if rows and all_recovered(rows) and not notes else 1


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
