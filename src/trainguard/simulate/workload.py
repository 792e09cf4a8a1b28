"""The job queue: synchronous training jobs on node subsets, started and stopped over time.

Outline of `schedule_jobs` (a small discrete-event simulation, run from a day before the span so
the cluster is already busy at its start):
1. jobs arrive as a Poisson process sized so the queue keeps about `target_utilization` of the
   node-time busy; sizes 1..32 nodes, durations log-normal (median 4 h);
2. whenever something changes (arrival, job end, node back from repair) the queue is scanned in
   order and every job that fits on free nodes starts (first fit with backfill); nodes with a
   planned maintenance before the job would end are not eligible (a reservation);
3. a job ends at its planned end, at the first hardware failure on one of its nodes, or at an
   application XID (a per-job hazard); after a failure or application XID the job is often
   resubmitted with its remaining work;
4. after a job ends its nodes stay idle for a few minutes (epilog) before the next job.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from trainguard.simulate.config import SimConfig
from trainguard.simulate.faults import AppXid, Benign, Failure, Outage

__all__ = ["Job", "schedule_jobs"]

_SIZES = np.array([1, 2, 4, 8, 16, 32])
_SIZE_P = np.array([0.22, 0.20, 0.20, 0.16, 0.13, 0.09])
_MEDIAN_DUR_S = 4 * 3600.0
_DUR_SIGMA = 0.8
_WARMUP_S = 86400
_RESUBMIT_P = 0.6


@dataclass(frozen=True, slots=True)
class Job:
    """One training job: where and when it ran and how it loads the hardware."""

    job_id: str
    nodes: tuple[int, ...]
    start_s: int
    end_s: int
    end_reason: str
    """"completed", "hw_failure", "app_xid" or "running" (still running at the end)."""
    intensity: float
    """Scale of GPU load (about 0.85-1; 0.45-0.65 for a benign low-intensity job)."""
    fb_used_mib: float
    ckpt_period_s: int
    ckpt_len_s: int
    ckpt_offset_s: int
    cpu_load: float
    """node_load1 level on each of its nodes."""
    restart_of: str | None = None

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1


@dataclass(slots=True)
class _Pending:
    job_id: str
    size: int
    duration_s: int
    restart_of: str | None


def _draw_size(rng: np.random.Generator, n_nodes: int) -> int:
    return int(min(rng.choice(_SIZES, p=_SIZE_P), n_nodes))


def _draw_duration(rng: np.random.Generator) -> int:
    d = _MEDIAN_DUR_S * float(np.exp(rng.normal(0, _DUR_SIGMA)))
    return int(min(max(d, 1200.0), 48 * 3600.0))


def schedule_jobs(cfg: SimConfig, rng: np.random.Generator, failures: list[Failure],
                  maintenance: list[Outage]) -> tuple[list[Job], list[AppXid], list[Benign]]:
    """Run the queue; returns jobs, the application XIDs that ended some, and job-wide benigns."""
    n = cfg.nodes
    mean_size = float(np.minimum(_SIZES, n) @ _SIZE_P)
    mean_dur = _MEDIAN_DUR_S * float(np.exp(_DUR_SIGMA ** 2 / 2))
    arrival_rate = cfg.target_utilization * n / (mean_size * mean_dur)
    concurrent = max(1.0, cfg.target_utilization * n / mean_size)
    app_rate = cfg.app_xids_per_day / 86400 / concurrent

    planned: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for o in maintenance:
        planned[o.node].append((o.start_s, o.end_s))
    fails: list[list[Failure]] = [[] for _ in range(n)]
    for f in failures:
        fails[f.node].append(f)
    down: list[list[tuple[int, int]]] = [list(p) for p in planned]
    for f in failures:
        down[f.node].append((f.time_s, f.back_s))

    t = cfg.start_s - _WARMUP_S
    busy_until = np.full(n, t, dtype=np.int64)
    wake: list[int] = []
    for spans in down:
        for _, end in spans:
            heapq.heappush(wake, end)
    queue: deque[_Pending] = deque()
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"job-{counter:05d}"

    for _ in range(max(1, round(n / mean_size * 1.2))):
        queue.append(_Pending(new_id(), _draw_size(rng, n), _draw_duration(rng), None))
    next_arrival = t + int(rng.exponential(1 / arrival_rate))
    jobs: list[Job] = []
    app_xids: list[AppXid] = []
    benign: list[Benign] = []

    while t < cfg.end_s:
        while next_arrival <= t:
            queue.append(_Pending(new_id(), _draw_size(rng, n), _draw_duration(rng), None))
            next_arrival += max(1, int(rng.exponential(1 / arrival_rate)))
        free = [i for i in range(n) if busy_until[i] <= t
                and not any(a <= t < b for a, b in down[i])]
        scanned = 0
        for pending in list(queue):
            scanned += 1
            if scanned > 64 or not free:
                break
            if pending.size > len(free):
                continue
            end = t + pending.duration_s
            eligible = [i for i in free if not any(t < a < end for a, _ in planned[i])]
            if len(eligible) < pending.size:
                continue
            pick = sorted(int(x) for x in rng.choice(eligible, pending.size, replace=False))
            queue.remove(pending)
            job, xid, extra = _run_job(cfg, rng, pending, pick, t, end, fails, app_rate)
            jobs.append(job)
            benign.extend(extra)
            if xid is not None:
                app_xids.append(xid)
            free = [i for i in free if i not in pick]
            epilog = int(rng.integers(60, 600))
            busy_until[pick] = job.end_s + epilog
            heapq.heappush(wake, job.end_s + epilog)
            if job.end_reason in ("hw_failure", "app_xid") and rng.random() < _RESUBMIT_P:
                left = pending.duration_s - (job.end_s - job.start_s)
                if left > 600:
                    # Resubmitted by the user or an auto-restart wrapper, after a short delay.
                    retry = _Pending(new_id(), pending.size, left, job.job_id)
                    heapq.heappush(wake, job.end_s + int(rng.integers(300, 1800)))
                    queue.appendleft(retry)
        nxt = next_arrival
        while wake and wake[0] <= t:
            heapq.heappop(wake)
        if wake:
            nxt = min(nxt, wake[0])
        t = max(t + 1, nxt)
    jobs.sort(key=lambda j: (j.start_s, j.job_id))
    return jobs, app_xids, benign


def _run_job(cfg: SimConfig, rng: np.random.Generator, pending: _Pending, nodes: list[int],
             start: int, end: int, fails: list[list[Failure]], app_rate: float,
             ) -> tuple[Job, AppXid | None, list[Benign]]:
    reason = "completed"
    for i in nodes:
        for f in fails[i]:
            if start < f.time_s < end:
                end, reason = f.time_s, "hw_failure"
    xid: AppXid | None = None
    if app_rate > 0:
        t_app = start + 600 + int(rng.exponential(1 / app_rate))
        if t_app < end:
            end, reason = t_app, "app_xid"
            code = int(rng.choice([13, 31, 43], p=[0.5, 0.3, 0.2]))
            gpus = (tuple(range(cfg.gpus_per_node)) if code != 31
                    else (int(rng.integers(cfg.gpus_per_node)),))
            xid = AppXid(pending.job_id, t_app, code, tuple(nodes), gpus)
    if reason == "completed" and end >= cfg.end_s:
        reason = "running"
    low = rng.random() < 0.08
    intensity = float(rng.uniform(0.45, 0.65) if low else rng.uniform(0.85, 1.0))
    job = Job(
        job_id=pending.job_id, nodes=tuple(nodes), start_s=start, end_s=end, end_reason=reason,
        intensity=intensity, fb_used_mib=float(rng.uniform(52_000, 78_000)),
        ckpt_period_s=int(rng.integers(30, 61)) * 60, ckpt_len_s=int(rng.integers(60, 300)),
        ckpt_offset_s=int(rng.integers(0, 1800)), cpu_load=float(rng.uniform(6, 24)),
        restart_of=pending.restart_of)
    extra: list[Benign] = []
    if low:
        extra += [Benign("low_intensity_job", i, None, start, end, intensity, job.job_id)
                  for i in nodes]
    if end - start > 3 * 3600 and rng.random() < 0.15:
        s0 = int(rng.integers(start + 1800, end - 1800))
        s1 = s0 + int(rng.integers(5 * 60, 20 * 60))
        mag = float(rng.uniform(0.3, 0.9))
        extra += [Benign("loader_stall", i, None, s0, s1, mag, job.job_id) for i in nodes]
    return job, xid, extra
