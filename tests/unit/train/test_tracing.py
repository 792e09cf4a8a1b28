"""The SDK tracer: step windows, spans, collective accounting and the state file; the
torch.distributed wrappers with a real single-rank gloo group."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ports import free_port

from trainguard.trace.statefile import read_state
from trainguard.train.tracing import Tracer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_windows_split_step_time_into_spans_and_collectives(tmp_path: Path) -> None:
    clock = Clock()
    t = Tracer(rank=2, state_path=tmp_path / "r.trace", window_s=1.0, wall=clock, perf=clock)
    assert t.on_step(0) is None  # opens the first window: start-up is not step time
    windows = []
    for step in range(1, 5):
        with t.span("data"):
            clock.t += 0.01
        with t.span("backward"):
            clock.t += 0.05
            call = t.enter("all_reduce", "world", 4, 1024, blocking=True)
            inner = t.enter("all_gather", "world", 4, 64, blocking=True)  # nested: not twice
            clock.t += 0.1
            t.exit(inner)
            clock.t += 0.1
            t.exit(call)
        clock.t += 0.04
        w = t.on_step(step)
        if w is not None:
            windows.append(w)
    [w] = windows  # 3 steps of 0.3 s pass 1 s only at the 4th step
    assert (w.rank, w.steps, w.first_step, w.last_step) == (2, 4, 1, 4)
    assert w.step_s == pytest.approx(1.2) and w.collective_s == pytest.approx(0.8)
    assert w.spans["data"].count == 4 and w.data_s == pytest.approx(0.04)
    assert w.collectives["all_reduce"].nbytes == 4096
    assert w.collectives["all_gather"].seconds == pytest.approx(0.4)
    assert w.compute_s == pytest.approx(1.2 - 0.8 - 0.04)
    st = read_state(tmp_path / "r.trace").state
    g = st.groups["world"]
    assert (g.entered_seq, g.completed_seq, st.step) == (8, 8, 4)
    assert [c.seq for c in t.recent][-2:] == [8, 7]  # in completion order
    assert t.flush() is None  # nothing since the last window


def test_an_async_collective_counts_its_time_but_not_as_blocked() -> None:
    clock = Clock()
    t = Tracer(rank=0, window_s=100.0, wall=clock, perf=clock)
    t.on_step(0)
    call = t.enter("all_reduce", "world", 2, 8, blocking=False)
    clock.t += 0.5
    t.exit(call)
    t.on_step(1)
    w = t.flush()
    assert w is not None and w.collective_s == 0.0
    assert w.collectives["all_reduce"].seconds == pytest.approx(0.5)


def test_span_state_is_visible_while_inside(tmp_path: Path) -> None:
    clock = Clock()
    t = Tracer(rank=0, state_path=tmp_path / "r.trace", wall=clock, perf=clock)
    with t.span("forward"), t.span("attention"):
        assert read_state(tmp_path / "r.trace").state.span == "attention"
    assert read_state(tmp_path / "r.trace").state.span is None


def test_an_unwritable_state_file_does_not_stop_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    t = Tracer(rank=0, state_path=blocker / "r.trace")
    with t.span("forward"):
        pass
    t.on_step(0)


def test_real_gloo_collectives_are_traced_and_ddp_broadcasts_seen(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import json, sys, torch, torch.distributed as dist
        import trainguard.train as tg
        from trainguard.trace.statefile import read_state
        s = tg.init()
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.BatchNorm1d(4))
        for step in range(3):
            with tg.span("forward"):
                y = model(torch.randn(8, 4))
            t = torch.ones(16)
            dist.all_reduce(t)
            dist.all_reduce(t, async_op=True).wait()
            dist.barrier()
            tg.step(step)
        tg.finish()
        st = read_state(s.env.trace_path).state
        print(json.dumps({"groups": {k: [g.entered_seq, g.completed_seq, g.last.op]
                                     for k, g in st.groups.items()},
                          "ops": sorted({c.op for c in s.tracer.recent})}))
        dist.destroy_process_group()
    """)
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()),
               TRAINGUARD_EVENTS=str(tmp_path / "rank0.events.jsonl"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    got = json.loads(done.stdout.strip().splitlines()[-1])
    # 3 steps x (DDP buffer broadcast + all_reduce + async all_reduce + barrier), plus DDP's
    # construction-time parameter broadcast
    entered, completed, _ = got["groups"]["world"]
    assert entered == completed and entered >= 12
    assert {"all_reduce", "barrier", "broadcast_coalesced"} <= set(got["ops"])
    records = [json.loads(line) for line in
               (tmp_path / "rank0.events.jsonl").read_text().splitlines()]
    [trace] = [r for r in records if r["kind"] == "trace"]
    assert trace["steps"] == 2 and trace["collectives"]["all_reduce"][0] == 4
    assert (tmp_path / "rank0.trace").exists()
