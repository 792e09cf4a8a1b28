"""Slurm job history -> :class:`SlurmJob` records -> store sessions and attempts.

Three sources, best first (:func:`load_history` picks the first that works):

- ``sacct`` with accounting (slurmdbd): ``-D`` lists a requeued job once per run.
- the jobcomp file (``JobCompType=jobcomp/filetxt``, path in ``JobCompLoc``): one line per finished
  run, a requeued job once per run. Read directly: ``sacct -c`` reads the same file but in Slurm
  22.05 splits job names at spaces (and then loses the state) and reports Start as Submit.
- ``squeue -t all --json``: jobs the controller still holds (``MinJobAge``), running ones
  included; a requeued job is one record with ``restart_cnt``.

Slurm's text times are local time without a zone; they are read in the local timezone unless a
``tz`` is given.

    >>> from datetime import timezone
    >>> jobs = parse_jobcomp("JobId=7 Name=train JobState=FAILED StartTime=2026-01-01T10:00:00 "
    ...                      "EndTime=2026-01-01T10:05:00 NodeList=node[1-2] ExitCode=3:0",
    ...                      tz=timezone.utc)
    >>> jobs[0].state, jobs[0].nodes, jobs[0].exit_code
    ('FAILED', ('node1', 'node2'), 3)
    >>> with Store.open(":memory:") as store:        # doctest: +SKIP
    ...     import_history(store, jobs)
    ImportResult(imported=1, skipped=0, updated=0)
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.slurm.commands import SlurmCommands, parse_key_values
from trainguard.recover.slurm.hostlist import expand_hostlist
from trainguard.store import RUNNING, AttemptRecord, Store
from trainguard.taxonomy import Category

log = logging.getLogger(__name__)

BACKEND = "slurm"
"""``backend`` of the store sessions this module writes."""

SACCT_FIELDS = ("JobID", "State", "ExitCode", "Start", "End", "NodeList", "Submit", "Reason",
                "JobName")
"""``sacct --format``; JobName last because it is the only field that may hold the delimiter."""

SOURCES = ("auto", "sacct", "jobcomp", "squeue")

# Slurm job state -> trainguard status. States not listed (PENDING, RUNNING, CONFIGURING,
# COMPLETING, SUSPENDED, REQUEUED, ...) mean the job is not finished: ``running``.
_STATUS = {
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "TIMEOUT": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "PREEMPTED": "failed",
    "CANCELLED": "cancelled",
    "REVOKED": "cancelled",
}
# Slurm job state -> failure category of the attempt (see failure_category).
_CATEGORY = {
    "NODE_FAIL": Category.SCHEDULER_NODE_FAILURE,
    "BOOT_FAIL": Category.SCHEDULER_NODE_FAILURE,
    "PREEMPTED": Category.SCHEDULER_NODE_FAILURE,  # as the evidence catalog's "preemption" rule
    "OUT_OF_MEMORY": Category.OOM_HOST,
}
_NO_VALUE = frozenset({"", "unknown", "none", "n/a", "(null)", "none assigned"})
_SIGKILL = 9


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One run of a Slurm job (a requeued job has one record per run in sacct and jobcomp)."""

    job_id: str
    name: str
    state: str
    """Base state without flags: ``COMPLETED``, ``FAILED``, ``NODE_FAIL``, ``RUNNING``, ..."""
    exit_code: int | None = None
    """The batch script's exit status; None when unknown (not finished)."""
    signal: int | None = None
    """The signal that ended it; None when none."""
    start: float | None = None
    """Unix seconds; None when it has not started."""
    end: float | None = None
    nodes: tuple[str, ...] = ()
    restarts: int = 0
    """How often Slurm requeued it before this record (squeue's ``restart_cnt``; 0 elsewhere)."""
    submit: float | None = None
    """Unix seconds; Slurm resets it when it requeues the job."""
    reason: str | None = None

    @property
    def status(self) -> str:
        """trainguard's status: ``succeeded``, ``failed``, ``cancelled`` or ``running``."""
        return _STATUS.get(self.state, RUNNING)

    @property
    def finished(self) -> bool:
        return self.status != RUNNING


@dataclass(frozen=True, slots=True)
class History:
    """Job records read from one source."""

    source: str
    """``sacct``, ``jobcomp`` or ``squeue``."""
    location: str | None
    """The jobcomp file, when that was the source."""
    jobs: tuple[SlurmJob, ...]


@dataclass(frozen=True, slots=True)
class ImportResult:
    imported: int
    """Jobs written as new sessions."""
    skipped: int
    """Jobs already in the store (same backend and job id) with nothing new."""
    updated: int = 0
    """Jobs imported earlier while running, now finished."""


@dataclass(frozen=True, slots=True)
class AttemptPlan:
    """One store attempt to write for a job run."""

    index: int
    nodes: tuple[str, ...]
    started: float
    ended: float | None
    status: str
    automatic: bool
    failure_category: str | None
    exit_codes: Mapping[str, int | None]
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """One store session (a Slurm job) and its attempts (its runs)."""

    external_id: str
    name: str
    status: str
    started: float
    ended: float | None
    attempts: tuple[AttemptPlan, ...]


# -- reading ----------------------------------------------------------------------------------


def parse_slurm_time(text: str | None, tz: tzinfo | None = None) -> float | None:
    """``2026-11-21T15:30:36`` (local time, or ``tz``) -> unix seconds; ``Unknown`` -> None."""
    if text is None or text.strip().lower() in _NO_VALUE:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        log.warning("unreadable Slurm time %r", text)
        return None
    if moment.tzinfo is None and tz is not None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()  # naive: local time, DST included


def parse_exit_code(text: str | None) -> tuple[int | None, int | None]:
    """``"3:0"`` -> ``(3, None)``; ``"0:9"`` -> ``(0, 9)``: exit status and signal."""
    code, _, sig = (text or "").strip().partition(":")
    try:
        exit_code = int(code)
    except ValueError:
        return None, None
    try:
        signal = int(sig) or None
    except ValueError:
        signal = None
    return exit_code, signal


def parse_jobcomp(text: str, *, tz: tzinfo | None = None) -> list[SlurmJob]:
    """Records of a jobcomp/filetxt file, in file order; lines without ``JobId=`` are skipped."""
    jobs: list[SlurmJob] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        pairs = parse_key_values(line)
        if not pairs.get("JobId"):
            log.warning("jobcomp line %d has no JobId; skipped", lineno)
            continue
        exit_code, signal = parse_exit_code(pairs.get("ExitCode"))
        jobs.append(SlurmJob(
            job_id=pairs["JobId"],
            name=pairs.get("Name", pairs.get("JobName", "")),
            state=_base_state(pairs.get("JobState", "")),
            exit_code=exit_code,
            signal=signal,
            start=parse_slurm_time(pairs.get("StartTime"), tz),
            end=parse_slurm_time(pairs.get("EndTime"), tz),
            nodes=_nodes(pairs.get("NodeList")),
            submit=parse_slurm_time(pairs.get("SubmitTime"), tz),
        ))
    return jobs


def read_jobcomp(path: Path, *, tz: tzinfo | None = None) -> list[SlurmJob]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read jobcomp file {path}: {exc.strerror or exc}") from exc
    return parse_jobcomp(text, tz=tz)


def parse_sacct(text: str, *, tz: tzinfo | None = None) -> list[SlurmJob]:
    """``sacct -P -n --format=`` :data:`SACCT_FIELDS` output, one record per line."""
    jobs: list[SlurmJob] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", len(SACCT_FIELDS) - 1)
        if len(fields) != len(SACCT_FIELDS):
            raise LaunchError(f"sacct: unexpected line {line!r}")
        row = dict(zip(SACCT_FIELDS, fields, strict=True))
        exit_code, signal = parse_exit_code(row["ExitCode"])
        reason = row["Reason"].strip()
        jobs.append(SlurmJob(
            job_id=row["JobID"].strip(),
            name=row["JobName"],
            state=_base_state(row["State"]),
            exit_code=exit_code,
            signal=signal,
            start=parse_slurm_time(row["Start"], tz),
            end=parse_slurm_time(row["End"], tz),
            nodes=_nodes(row["NodeList"]),
            submit=parse_slurm_time(row["Submit"], tz),
            reason=None if reason.lower() in _NO_VALUE else reason,
        ))
    return jobs


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """``squeue --json`` (Slurm 22.05, OpenAPI v0.0.38; later versions' ``{"number": ...}``
    numbers and state lists are read too)."""
    try:
        doc = json.loads(text)
        raw_jobs = doc["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise LaunchError(f"squeue --json: unreadable output ({exc})") from exc
    jobs: list[SlurmJob] = []
    for raw in raw_jobs:
        state = raw.get("job_state", "")
        state = _base_state(state[0] if isinstance(state, list) and state else str(state or ""))
        exit_code, signal = _json_exit(raw.get("exit_code"))
        start, end = _json_number(raw.get("start_time")), _json_number(raw.get("end_time"))
        if state not in _STATUS:  # not finished: squeue shows estimates, not times
            end, exit_code, signal = None, None, None
            if state == "PENDING":
                start = None
        reason = str(raw.get("state_reason") or "")
        jobs.append(SlurmJob(
            job_id=str(raw.get("job_id", "")),
            name=str(raw.get("name", "")),
            state=state,
            exit_code=exit_code,
            signal=signal,
            start=start,
            end=end,
            nodes=_nodes(str(raw.get("nodes") or "")),
            restarts=int(_json_number(raw.get("restart_cnt")) or 0),
            submit=_json_number(raw.get("submit_time")),
            reason=None if reason.lower() in _NO_VALUE else reason,
        ))
    return jobs


def load_history(
    commands: SlurmCommands,
    *,
    source: str = "auto",
    jobcomp: Path | None = None,
    since: str = "now-7days",
    tz: tzinfo | None = None,
) -> History:
    """Read job records from ``source``; ``auto``: sacct if accounting works, else the jobcomp
    file named by ``scontrol show config`` (when readable here), else ``squeue --json``.

    ``jobcomp`` (a path) reads that file without asking Slurm anything.
    """
    if source not in SOURCES:
        raise ConfigError(f"history source must be one of {', '.join(SOURCES)}, not {source!r}")
    if jobcomp is not None:
        return History("jobcomp", str(jobcomp), tuple(read_jobcomp(jobcomp, tz=tz)))
    if source in ("auto", "sacct"):
        try:
            text = commands.sacct(SACCT_FIELDS, since=since)
            return History("sacct", None, tuple(parse_sacct(text, tz=tz)))
        except LaunchError as exc:
            if source == "sacct":
                raise
            log.info("sacct unavailable (%s); trying the jobcomp file", exc)
    if source in ("auto", "jobcomp"):
        config = commands.show_config()
        location = config.get("JobCompLoc", "")
        if config.get("JobCompType") == "jobcomp/filetxt" and Path(location).is_file():
            path = Path(location)
            return History("jobcomp", location, tuple(read_jobcomp(path, tz=tz)))
        if source == "jobcomp":
            raise ConfigError(
                f"no readable jobcomp file (JobCompType={config.get('JobCompType')!r}, "
                f"JobCompLoc={location!r})"
            )
        log.info("no readable jobcomp file; using squeue --json")
    return History("squeue", None, tuple(parse_squeue_json(commands.squeue_json())))


# -- mapping to store records -----------------------------------------------------------------


def failure_category(job: SlurmJob) -> str | None:
    """Why a run failed, as far as Slurm's state tells.

    NODE_FAIL, BOOT_FAIL, PREEMPTED -> ``scheduler_node_failure``; OUT_OF_MEMORY -> ``oom_host``;
    FAILED by SIGKILL -> ``oom_host`` (the kernel OOM killer is the usual sender when Slurm
    gives no other reason); every other failure (FAILED, TIMEOUT, DEADLINE) -> ``unknown``: the
    job's logs decide (``trainguard logs classify``). None when the run did not fail.
    """
    if job.status != "failed":
        return None
    if job.state == "FAILED" and job.signal == _SIGKILL:
        return Category.OOM_HOST.value
    return _CATEGORY.get(job.state, Category.UNKNOWN).value


def plan_sessions(jobs: Iterable[SlurmJob]) -> list[SessionPlan]:
    """Group records by job id (first appearance order) into one session per job.

    1. A job's records, ordered by start, become attempts 0, 1, ... (Slurm requeued it).
    2. If the last record says it was requeued more often than there are earlier records
       (squeue keeps only the last run), placeholder attempts without nodes stand in for the
       missing runs (``detail["placeholder"]``).
    3. Runs that never started (pending, or cancelled while pending) get no attempt.
    """
    groups: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        groups.setdefault(job.job_id, []).append(job)
    return [_plan_one(job_id, runs) for job_id, runs in groups.items()]


def import_history(store: Store, jobs: Iterable[SlurmJob]) -> ImportResult:
    """Write jobs into ``store`` as sessions (backend ``slurm``, external id = job id).

    Idempotent: a job already imported is skipped, except one imported while running that has
    finished since: its attempts and session are completed (``updated``).
    """
    existing = {s.external_id: s for s in store.sessions()
                if s.backend == BACKEND and s.external_id is not None}
    imported = skipped = updated = 0
    for plan in plan_sessions(jobs):
        old = existing.get(plan.external_id)
        if old is None:
            session_id = store.create_session(
                plan.name, backend=BACKEND, started=plan.started, external_id=plan.external_id,
                config={"slurm_job_id": plan.external_id})
            _write_attempts(store, session_id, plan, {})
            if plan.status != RUNNING and plan.ended is not None:
                store.finish_session(session_id, status=plan.status, ended=plan.ended)
            imported += 1
        elif old.status == RUNNING and plan.status != RUNNING and plan.ended is not None:
            known = {a.index: a for a in store.attempts(old.id)}
            _write_attempts(store, old.id, plan, known)
            store.finish_session(old.id, status=plan.status, ended=plan.ended)
            updated += 1
        else:
            skipped += 1
    return ImportResult(imported=imported, skipped=skipped, updated=updated)


def _write_attempts(
    store: Store, session_id: int, plan: SessionPlan, known: Mapping[int, AttemptRecord]
) -> None:
    """Create the plan's attempts missing from ``known`` (by index) and finish those that are
    finished in the plan but still running in the store."""
    for attempt in plan.attempts:
        old = known.get(attempt.index)
        if old is not None and old.status != RUNNING:
            continue
        attempt_id = old.id if old is not None else store.create_attempt(
            session_id, index=attempt.index, nodes=attempt.nodes, started=attempt.started,
            automatic=attempt.automatic)
        if attempt.ended is not None:
            store.finish_attempt(
                attempt_id, ended=attempt.ended, status=attempt.status,
                failure_category=attempt.failure_category, exit_codes=attempt.exit_codes,
                detail=attempt.detail)


def _plan_one(job_id: str, runs: list[SlurmJob]) -> SessionPlan:
    runs = sorted(runs, key=lambda r: math.inf if r.start is None else r.start)  # stable
    final = runs[-1]
    missing = final.restarts - (len(runs) - 1)
    placeholders = [replace(final, state="REQUEUED", start=None, end=None, nodes=(),
                            exit_code=None, signal=None, reason=None)] * max(missing, 0)
    attempts: list[AttemptPlan] = []
    for position, run in enumerate([*placeholders, *runs]):
        last = position == len(placeholders) + len(runs) - 1
        plan = _attempt(run, index=len(attempts), last=last, placeholder=position < missing)
        if plan is not None:
            attempts.append(plan)
    started = next((a.started for a in attempts), None)
    if started is None:
        started = _first_known(final.submit, final.start, final.end)
    return SessionPlan(
        external_id=job_id,
        name=final.name or f"slurm-{job_id}",
        status=final.status,
        started=started,
        ended=_first_known(final.end, final.start, final.submit) if final.finished else None,
        attempts=tuple(attempts),
    )


def _attempt(run: SlurmJob, *, index: int, last: bool, placeholder: bool) -> AttemptPlan | None:
    detail: dict[str, Any] = {"slurm_state": run.state}
    if run.reason:
        detail["slurm_reason"] = run.reason
    if placeholder:
        # squeue knows only that Slurm requeued the job, not when, where or why
        moment = _first_known(run.submit)
        detail["placeholder"] = True
        return AttemptPlan(index=index, nodes=(), started=moment, ended=moment, status="failed",
                           automatic=index > 0, failure_category=Category.UNKNOWN.value,
                           exit_codes={"job": None}, detail=detail)
    if not run.nodes:
        return None  # never ran (pending, or cancelled while pending: jobcomp has a StartTime)
    started = _first_known(run.start, run.submit, run.end)
    status, category = run.status, failure_category(run)
    ended: float | None = None
    if run.finished or not last:
        ended = _first_known(run.end, started)
    if not run.finished and not last:  # an earlier run of a job Slurm requeued
        status, category = "failed", Category.UNKNOWN.value
    exit_codes: dict[str, int | None] = {
        "job": -run.signal if run.signal else run.exit_code if ended is not None else None}
    if run.exit_code is not None or run.signal is not None:
        detail["slurm_exit_code"] = f"{run.exit_code or 0}:{run.signal or 0}"
    return AttemptPlan(index=index, nodes=run.nodes, started=started, ended=ended,
                       status=status, automatic=index > 0, failure_category=category,
                       exit_codes=exit_codes, detail=detail)


def _first_known(*values: float | None) -> float:
    for value in values:
        if value is not None:
            return value
    log.warning("Slurm record without any time; using 0")
    return 0.0


def _base_state(state: str) -> str:
    """``"CANCELLED by 0"`` -> ``CANCELLED``; ``"completed"`` -> ``COMPLETED``."""
    parts = state.split()
    return parts[0].upper().rstrip("+") if parts else "UNKNOWN"


def _nodes(text: str | None) -> tuple[str, ...]:
    if text is None or text.strip().lower() in _NO_VALUE:
        return ()
    return expand_hostlist(text)


def _json_number(value: Any) -> float | None:
    """v0.0.38: a plain number (0 = unset); later: ``{"set": bool, "number": n}``."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value == 0:
        return None
    return float(value)


def _json_exit(value: Any) -> tuple[int | None, int | None]:
    """v0.0.38: a wait(2) status (768 = exit 3; 9 = SIGKILL); later: a dict with
    ``return_code`` and ``signal.id``."""
    if isinstance(value, dict):
        code = _json_number(value.get("return_code"))
        signal_info = value.get("signal") or {}
        sig = _json_number(signal_info.get("id") if isinstance(signal_info, dict) else None)
        return int(code or 0), (int(sig) if sig else None)
    if not isinstance(value, int) or isinstance(value, bool):
        return None, None
    if value & 0x7F:
        return 0, value & 0x7F
    return (value >> 8) & 0xFF, None


__all__ = [
    "BACKEND",
    "SACCT_FIELDS",
    "SOURCES",
    "AttemptPlan",
    "History",
    "ImportResult",
    "SessionPlan",
    "SlurmJob",
    "failure_category",
    "import_history",
    "load_history",
    "parse_exit_code",
    "parse_jobcomp",
    "parse_sacct",
    "parse_slurm_time",
    "parse_squeue_json",
    "plan_sessions",
    "read_jobcomp",
]
