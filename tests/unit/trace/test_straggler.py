"""`detect_stragglers` on synthetic synchronous jobs: a slow rank (compute, a sleep between steps,
data loading) is found within 60 s of its onset with the right cause; healthy runs with realistic
noise (per-window jitter, spikes, rank 0's checkpoints and logging, a slow start) flag nobody;
blips, recovery, silence, single ranks, empty input and bad config."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pytest

from trainguard.errors import ConfigError
from trainguard.trace.model import OpTime, TraceWindow
from trainguard.trace.straggler import (
    CAUSE_COMPUTE,
    CAUSE_DATA,
    StragglerConfig,
    StragglerReport,
    detect_stragglers,
)

T0 = 1_700_000_000.0
PERIOD = 5.0
ONSET = 60.0
Windows = dict[int, list[TraceWindow]]


@dataclass(frozen=True)
class Slow:
    """Rank `rank` is slow from `start` to `end` (seconds after T0).

    ``compute``: its compute takes `factor` times as long; ``sleep``: it sleeps `factor - 1`
    healthy step times between steps (the ``slow`` fault); ``data``: its data loading takes
    `factor - 1` healthy step times longer."""

    rank: int
    kind: str = "compute"
    factor: float = 1.3
    start: float = ONSET
    end: float = math.inf


@dataclass(frozen=True)
class Job:
    """A synthetic synchronous data-parallel job, simulated second by second; every rank writes
    a window every PERIOD s."""

    ranks: int
    seconds: int = 300
    compute: float = 0.010
    """Healthy compute per step (the example on a 2-core CPU box: 40-60 ms)."""
    data: float = 0.0005
    comm: float = 0.002
    """Time a collective takes when nobody is late."""
    common: float = 0.3
    """Every 3 s, for all ranks at once: compute times uniform(1 - common, 1 + common) (the
    machine's load varies; measured on a 2-core box: +-30% and more)."""
    jitter: float = 0.1
    """Per window, per rank: compute times uniform(1 - jitter, 1 + jitter) (measured: a few %,
    at times 15%)."""
    spike_p: float = 0.03
    """Chance per window per rank of a slow window (1.5x to 2.5x)."""
    ckpt_every_s: int = 20
    """Rank 0 saves a checkpoint this often (the others wait in a barrier)."""
    ckpt_s: float = 0.8
    rank0_extra: float = 1.03
    """Rank 0 also logs (and writes checkpoints in the background): a little more compute."""
    warmup_s: int = 10
    """The first seconds are slow for every rank, unevenly."""
    clock_s: float = 0.5
    """Each rank's clock is off by up to this much."""
    phased: bool = False
    """Each rank's windows on its own phase. The SDK closes windows on steps, which every
    rank takes at the same time, so its windows line up (False)."""
    pause_p: float = 0.0
    """Chance per 5 s of a pause (no steps on any rank)."""


def simulate(job: Job, seed: int, slow: Slow | None = None,
             stop: Mapping[int, float] | None = None) -> Windows:
    """Windows per rank; `stop` maps a rank to the time its records end."""
    rng = random.Random(seed)
    n = job.ranks
    phase = [rng.randrange(int(PERIOD)) if job.phased else 0 for _ in range(n)]
    clock = [rng.uniform(-job.clock_s, job.clock_s) for _ in range(n)]
    load = [rng.uniform(1 - job.common, 1 + job.common) for _ in range(job.seconds // 3 + 1)]
    paused = [rng.random() < job.pause_p for _ in range(job.seconds // 5 + 1)]
    per_window = [[rng.uniform(1 - job.jitter, 1 + job.jitter)
                   * (rng.uniform(1.5, 2.5) if rng.random() < job.spike_p else 1.0)
                   for _ in range(job.seconds // int(PERIOD) + 2)] for _ in range(n)]
    healthy_step = job.compute + job.data + job.comm
    acc = [[0.0] * 6 for _ in range(n)]  # steps, step_s, compute, data, collective, ckpt
    out: Windows = {r: [] for r in range(n)}

    def flush(r: int, end: int) -> None:
        steps, step_s, compute, data, coll, ckpt = acc[r]
        acc[r] = [0.0] * 6
        start = max(0, end - int(PERIOD))
        if stop is not None and start >= stop.get(r, math.inf):
            return
        count = round(steps)
        spans = {"data": OpTime(count, data), "forward": OpTime(count, compute / 3),
                 "backward": OpTime(count, compute * 2 / 3)}
        if ckpt:
            spans["checkpoint"] = OpTime(1, ckpt)
        out[r].append(TraceWindow(
            rank=r, start=T0 + start + clock[r], end=T0 + end + clock[r], steps=count,
            step_s=step_s, collective_s=coll, spans=spans if count else {},
            collectives={"all_gather": OpTime(count, count * job.comm)}))

    for t in range(job.seconds):
        for r in range(n):
            if t > 0 and (t - phase[r]) % int(PERIOD) == 0:
                flush(r, t)
        if paused[t // 5]:
            continue
        work: list[tuple[float, float]] = []
        for r in range(n):
            f = load[t // 3] * per_window[r][(t - phase[r]) // int(PERIOD) + 1]
            if t < job.warmup_s:
                f *= rng.uniform(2.0, 5.0)
            if r == 0:
                f *= job.rank0_extra
            compute, data = job.compute * f, job.data * rng.uniform(0.8, 1.2)
            if slow is not None and slow.rank == r and slow.start <= t < slow.end:
                if slow.kind == "compute":
                    compute *= slow.factor
                elif slow.kind == "sleep":
                    compute += (slow.factor - 1) * healthy_step
                else:
                    data += (slow.factor - 1) * healthy_step
            work.append((compute, data))
        step = max(c + d for c, d in work) + job.comm  # everyone waits for the slowest
        ckpt = job.ckpt_s if t > 0 and t % job.ckpt_every_s == 0 else 0.0
        steps = (1.0 - ckpt) / step
        for r, (compute, data) in enumerate(work):
            own_ckpt = ckpt if r == 0 else 0.0
            a = acc[r]
            a[0] += steps
            a[1] += 1.0
            a[2] += steps * compute
            a[3] += steps * data
            a[4] += steps * (step - compute - data) + ckpt - own_ckpt  # the others wait for it
            a[5] += own_ckpt
    for r in range(n):
        flush(r, job.seconds)
    return out


def check_json(report: StragglerReport) -> None:
    json.dumps(report.to_dict(timeline=True), allow_nan=False)


# --- a straggler is found ------------------------------------------------------------------------


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
@pytest.mark.parametrize("kind", ["compute", "sleep"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slow_rank_is_declared_within_60_s(ranks: int, kind: str, seed: int) -> None:
    slow = Slow(rank=ranks - 1, kind=kind)
    report = detect_stragglers(simulate(Job(ranks), seed, slow), StragglerConfig(),
                               hosts={r: f"node-{r // 2}" for r in range(ranks)})
    assert report.straggler_ranks == (slow.rank,)
    (s,) = report.stragglers
    onset = T0 + ONSET
    assert onset < s.first_flagged <= s.declared_at <= onset + 60.0
    assert s.status == "ongoing" and s.recovered_at is None
    assert s.host == f"node-{slow.rank // 2}" and report.straggler_hosts == (s.host,)
    assert s.cause == CAUSE_COMPUTE
    extra = s.extra_s
    assert extra["compute"] > 0.002 and abs(extra["data"]) < 0.0005
    assert extra["collective"] < -0.001  # the peers wait for it (rank 0 also saves checkpoints)
    assert s.slowdown >= 0.2
    assert 0.1 < s.cost < 0.3
    assert s.steps_per_s_lost is not None and s.steps_per_s_lost > 0
    summary = {r.rank: r for r in report.ranks}
    assert summary[slow.rank].straggler and not summary[0].straggler
    assert f"rank {slow.rank} (node-" in s.describe() and "in compute" in s.describe()
    check_json(report)


def test_a_rank_slow_from_the_start_is_declared_within_60_s() -> None:
    report = detect_stragglers(simulate(Job(4), 3, Slow(rank=2, kind="sleep", start=0.0)))
    (s,) = report.stragglers
    assert s.rank == 2 and s.declared_at <= T0 + 60.0


@pytest.mark.parametrize("ranks", [2, 4])
def test_slow_data_loader_is_attributed_to_data(ranks: int) -> None:
    report = detect_stragglers(simulate(Job(ranks), 7, Slow(rank=1, kind="data", factor=1.4)))
    (s,) = report.stragglers
    assert s.rank == 1 and s.cause == CAUSE_DATA and "in data" in s.describe()
    assert s.extra_s["data"] > 0.004 and abs(s.extra_s["compute"]) < 0.002
    assert s.extra_s["collective"] < -0.003
    assert T0 + ONSET < s.declared_at <= T0 + ONSET + 60.0


def test_cost_matches_the_injected_excess() -> None:
    # No noise: rank 2 sleeps 30% of a healthy step (3.6 ms) in every step. (The simulation
    # rounds each window's steps: 0.2% off at most.)
    job = Job(4, data=0.0, common=0.0, jitter=0.0, spike_p=0.0, rank0_extra=1.0,
              ckpt_every_s=10**6)
    (s,) = detect_stragglers(simulate(job, 0, Slow(rank=2, kind="sleep"))).stragglers
    healthy = job.compute + job.comm
    excess = 0.3 * (job.compute + job.comm + job.data)
    assert s.excess_s == pytest.approx(excess, rel=0.005)
    assert s.cost == pytest.approx(excess / (healthy + excess), rel=0.005)
    assert s.steps_per_s == pytest.approx(1 / (healthy + excess), rel=0.005)
    assert s.steps_per_s_lost == pytest.approx(1 / healthy - 1 / (healthy + excess), rel=0.005)
    assert s.slowdown == pytest.approx(excess / job.compute, rel=0.005)
    assert s.peers.collective_s - s.own.collective_s == pytest.approx(excess, rel=0.005)


# --- no false stragglers -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_healthy_runs_flag_nobody(seed: int) -> None:
    for ranks in (2, 3, 4, 8):
        job = Job(ranks, seconds=600, pause_p=0.02)
        report = detect_stragglers(simulate(job, seed * 100 + ranks), StragglerConfig())
        assert report.stragglers == (), [s.describe() for s in report.stragglers]
        assert len(report.evaluations) > 100 and report.note is None
        assert all(r.slowdown is not None and abs(r.slowdown) < 0.1 for r in report.ranks)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_a_two_window_blip_is_not_a_straggler(ranks: int) -> None:
    blip = Slow(rank=1, factor=2.5, start=100.0, end=110.0)
    job = Job(ranks, spike_p=0.0)
    report = detect_stragglers(simulate(job, 3, blip))
    assert report.stragglers == ()
    assert max(e.slowdown.get(1, 0.0) for e in report.evaluations) < 0.15
    # The same slowdown lasting 40 s is a straggler.
    longer = detect_stragglers(simulate(job, 3, replace(blip, end=140.0)))
    assert longer.straggler_ranks == (1,)


def test_recovery_ends_the_episode() -> None:
    report = detect_stragglers(simulate(Job(4), 11, Slow(rank=3, factor=1.5, end=150.0)))
    (s,) = report.stragglers
    assert s.status == "recovered" and s.recovered_at is not None
    assert T0 + 150.0 < s.recovered_at <= T0 + 150.0 + 45.0
    assert s.last_flagged < s.recovered_at
    assert s.evaluations >= StragglerConfig().persist
    assert not any(3 in e.flagged for e in report.evaluations if e.at > s.recovered_at)


def test_a_straggler_that_stops_reporting_is_silent() -> None:
    windows = simulate(Job(4), 5, Slow(rank=2, factor=1.5), stop={2: 200.0})
    report = detect_stragglers(windows)
    (s,) = report.stragglers
    assert s.rank == 2 and s.status == "silent" and s.recovered_at is None
    assert report.silent == (2,)
    assert T0 + 200.0 <= s.last_flagged <= T0 + 200.0 + 30.0


def test_tiny_compute_needs_an_absolute_excess() -> None:
    # 0.1 ms of compute per step: 30% more is 0.03 ms, below timer and scheduler noise.
    job = Job(4, compute=0.0001, data=0.0, comm=0.004)
    windows = simulate(job, 2, Slow(rank=1))
    assert detect_stragglers(windows).stragglers == ()
    loose = StragglerConfig(min_excess_s=0.0, min_cost=0.0)
    assert detect_stragglers(windows, loose).straggler_ranks == (1,)


def test_widely_spread_peers_need_a_robust_deviation() -> None:
    # Ranks 1.0x to 1.3x as slow as rank 0, and rank 4 1.45x: 26% above the others' median,
    # but only about 2 robust deviations above their spread.
    windows: Windows = {}
    for r, f in enumerate((1.0, 1.1, 1.2, 1.3, 1.45)):
        windows[r] = [TraceWindow(r, T0 + t, T0 + t + PERIOD, 100, 100 * 0.02,
                                  100 * (0.02 - 0.01 * f)) for t in range(0, 300, 5)]
    assert detect_stragglers(windows).stragglers == ()
    assert detect_stragglers(windows, StragglerConfig(mad_k=0)).straggler_ranks == (4,)


# --- odd input -----------------------------------------------------------------------------------


def test_empty_input() -> None:
    empty: list[Windows] = [{}, {0: [], 1: []}]
    for windows in empty:
        report = detect_stragglers(windows)
        assert report.stragglers == () and report.evaluations == ()
        assert report.note is not None and "no trace windows" in report.note
        check_json(report)


def test_single_rank_has_nothing_to_compare() -> None:
    windows = simulate(Job(1), 0, Slow(rank=0, factor=2.0))
    report = detect_stragglers(windows, hosts={0: "node-a"})
    assert report.stragglers == () and report.evaluations == ()
    assert report.note is not None and "only rank 0" in report.note
    (summary,) = report.ranks
    assert summary.host == "node-a" and summary.slowdown is None
    assert summary.breakdown is not None and summary.breakdown.compute_s > 0.01
    check_json(report)


def test_a_rank_without_windows_is_listed_and_silent() -> None:
    windows = simulate(Job(3), 4, Slow(rank=1))
    windows[3] = []
    report = detect_stragglers(windows)
    assert report.straggler_ranks == (1,)
    rank3 = report.ranks[3]
    assert rank3.windows == 0 and rank3.breakdown is None and rank3.last_end is None
    assert report.silent == (3,)


def test_windows_without_steps_are_skipped() -> None:
    report = detect_stragglers(simulate(Job(4, pause_p=0.2), 9, Slow(rank=2, factor=1.5)))
    assert report.straggler_ranks == (2,)
    assert all(r.skipped > 10 for r in report.ranks)  # the pauses, beyond the warm-up


def test_warmup_is_ignored() -> None:
    # Rank 1 starts up 3x slower for 30 s (say, a slower compile): with 40 s of warm-up that
    # is not a straggler; with the default 10 s it is one, for a while.
    windows = simulate(Job(2, spike_p=0.0), 1, Slow(rank=1, factor=3.0, start=0.0, end=30.0))
    report = detect_stragglers(windows, StragglerConfig(warmup_s=40))
    assert report.stragglers == ()
    assert all(r.skipped == 8 for r in report.ranks)  # the windows that start before 40 s
    (s,) = detect_stragglers(windows).stragglers
    assert s.rank == 1 and s.status == "recovered"


def test_clock_offsets_do_not_matter() -> None:
    windows = simulate(Job(4, clock_s=0.0), 6, Slow(rank=1, kind="sleep"))
    shifted = {r: [replace(w, start=w.start + 1.5 * r, end=w.end + 1.5 * r) for w in ws]
               for r, ws in windows.items()}
    a, b = detect_stragglers(windows), detect_stragglers(shifted)
    assert a.straggler_ranks == b.straggler_ranks == (1,)
    assert a.stragglers[0].slowdown == pytest.approx(b.stragglers[0].slowdown, abs=0.05)


@pytest.mark.parametrize("ranks", [2, 4])
def test_misaligned_windows_are_paired_by_overlap(ranks: int) -> None:
    # Windows on a different phase on every rank (not what the SDK writes, but what another
    # tracer or a restarted rank might): each is compared with the others' overlapping ones.
    job = Job(ranks, phased=True)
    report = detect_stragglers(simulate(job, 4, Slow(rank=ranks - 1, kind="sleep")))
    (s,) = report.stragglers
    assert s.rank == ranks - 1 and T0 + ONSET < s.declared_at <= T0 + ONSET + 60.0
    assert detect_stragglers(simulate(job, 4)).stragglers == ()


def test_timeline_and_json() -> None:
    report = detect_stragglers(simulate(Job(3), 0, Slow(rank=0, factor=1.5)))
    out = report.to_dict(timeline=True)
    assert out["straggler_ranks"] == [0]
    assert len(out["evaluations"]) == len(report.evaluations) > 50
    assert "evaluations" not in report.to_dict()
    flagged = [e for e in out["evaluations"] if 0 in e["flagged"]]
    assert flagged and flagged[0]["at"] == out["stragglers"][0]["first_flagged"]
    assert out["ranks"][0]["slowdown"] > 0.15 and out["ranks"][0]["straggler"]
    check_json(report)


# --- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), [
    ("window_s", 0.0), ("window_s", math.nan), ("every_s", -1.0), ("every_s", 60.0),
    ("min_slowdown", 0.0), ("min_excess_s", -0.001), ("min_cost", 1.0), ("mad_k", -1.0),
    ("trim", 0.5), ("trim", -0.1), ("persist", 0), ("persist", 2.5), ("min_steps", 0),
    ("warmup_s", -5.0), ("warmup_s", math.inf), ("window_s", True),
])
def test_bad_config_names_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"straggler\.{key} "):
        StragglerConfig(**{key: value})  # type: ignore[arg-type]


def test_default_config_is_valid() -> None:
    cfg = StragglerConfig()
    assert cfg.every_s <= cfg.window_s and cfg.to_dict()["persist"] == cfg.persist


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
def test_describe_says_when_in_local_time_not_unix_seconds(
        tz: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from datetime import datetime

    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        report = detect_stragglers(simulate(Job(3), 1, Slow(rank=2, kind="compute")))
        (s,) = report.stragglers
        text = s.describe()
        when = datetime.fromtimestamp(s.first_flagged).astimezone()
        assert f"since {when.isoformat(sep=' ', timespec='seconds')} " in text, text
        assert "t=" not in text and f"{s.first_flagged:.0f}" not in text
        assert f"flagged for {s.last_flagged - s.first_flagged:.0f} s" in text
    finally:
        monkeypatch.undo()
        time.tzset()


# --- issue #28: why nothing could be compared ------------------------------------------------


def test_a_short_attempt_is_too_short_not_short_of_peers() -> None:
    """Every window inside the warm-up: the reason is the length, with three ranks there."""
    windows = {r: ws[:1] for r, ws in simulate(Job(3), 0).items()}
    report = detect_stragglers(windows)
    assert report.note is not None and not report.conclusive
    assert "no rank has trace windows with steps after its first 10 s" in report.note
    assert "3 rank(s)" in report.note and "too short to judge" in report.note
    assert "peers" not in report.note
    assert report.to_dict()["conclusive"] is False


def test_ranks_that_never_share_an_evaluation_window_are_too_short_to_judge() -> None:
    report = detect_stragglers(simulate(Job(3, seconds=25), 0))  # 15 s after the warm-up
    assert report.evaluations and not report.conclusive
    assert report.note is not None and "too short to judge" in report.note


def test_a_run_that_compares_ranks_is_conclusive() -> None:
    report = detect_stragglers(simulate(Job(3), 2))
    assert report.conclusive and report.note is None and report.stragglers == ()
