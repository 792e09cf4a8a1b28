"""The pure parts of benchmarks/bench_agents.py: percentiles, /proc parsing, the lines the
benchmark times, the recovery table and the verdicts. No process or cluster is started."""

from __future__ import annotations

import json
import re

import pytest
from script_module import load_script

ba = load_script("benchmarks/bench_agents.py", "bench_agents")


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([5.0], 50, 5.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
    ([float(i) for i in range(1, 101)], 99, 99.0),
    ([float(i) for i in range(1, 1001)], 99, 990.0),
    ([3.0, 1.0, 2.0], 100, 3.0),
])
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert ba.percentile(values, q) == expected


def test_percentile_rejects_an_empty_sample_and_bad_q() -> None:
    with pytest.raises(ValueError, match="empty"):
        ba.percentile([], 50)
    with pytest.raises(ValueError, match="q must be"):
        ba.percentile([1.0], 0)


def test_dist_of_a_latency_sample() -> None:
    sample = [0.010] * 98 + [0.050, 0.200]
    d = ba.dist(sample)
    assert (d.n, d.p50, d.p99, d.max) == (100, 0.010, 0.050, 0.200)
    assert ba.dist([]) is None


def test_cpu_ticks_counts_fields_after_a_command_name_with_spaces_and_parens() -> None:
    fields = ["S"] + [str(i) for i in range(4, 53)]  # field 3 (state) onwards
    fields[11], fields[12] = "250", "40"             # utime (14), stime (15)
    stat = "1234 (py (agent) x) " + " ".join(fields)
    assert ba.cpu_ticks(stat) == 290
    assert ba.cpu_percent(290, 29.0, 100) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="wall_s"):
        ba.cpu_percent(1, 0.0, 100)


def test_vm_hwm() -> None:
    assert ba.vm_hwm_kib("Name:\tpython\nVmPeak:\t 9 kB\nVmHWM:\t   59684 kB\n") == 59684
    with pytest.raises(ValueError, match="VmHWM"):
        ba.vm_hwm_kib("Name:\tpython\n")


@pytest.mark.parametrize(("text", "step"), [
    ("step 11 loss 0.5\nstep 12 loss 0.4\n", None),                       # no restart yet
    ("step 12 loss 0.4\nresumed from step-10.pt at step 10\n", None),      # not stepped yet
    ("step 12 loss 0.4\nresumed from step-10.pt at step 10\nW torchrun noise\n"
     "step 11 loss 0.41\nstep 12 loss 0.40\n", 11),
    ("resumed from step-5.pt at step 5\nstep six loss\nstep 6 loss 0.3\n", 6),
])
def test_first_step_after_resume(text: str, step: int | None) -> None:
    assert ba.first_step_after_resume(text) == step


def test_line_delays_of_output_and_sdk_lines() -> None:
    out = b"t 100.000000\nt 100.020000\nnot a stamp\n"
    assert ba.line_delays(out, 100.05, "t") == pytest.approx([0.05, 0.03])
    sdk = (json.dumps({"t": 99.5, "kind": "step"}) + "\n{broken\n"
           + json.dumps({"kind": "no stamp"}) + "\n").encode()
    assert ba.line_delays(sdk, 100.0, "t") == pytest.approx([0.5])


def test_rank_pattern_matches_ranks_not_torchrun() -> None:
    pat = re.compile(ba.RANK_PATTERN)
    assert pat.search("/v/bin/python /repo/tests/integration/scripts/plain_ddp.py --steps 30")
    assert pat.search("/v/bin/python3.11 -u /repo/scripts/plain_ddp.py --steps 30")
    assert not pat.search("/v/bin/python /v/bin/torchrun --nnodes=3 --max-restarts=3 "
                          "/repo/scripts/plain_ddp.py --steps 30")
    assert not pat.search("/v/bin/python -m trainguard.agent --node host2")


def _rows() -> list[object]:
    return [ba.Recovery("trainguard", (4.0, 6.0, 5.0)),
            ba.Recovery("torchrun", (8.0, None, 10.0), ("run 2: no step after the kill",))]


def test_recovery_median_ignores_runs_that_did_not_recover() -> None:
    tg, tr = _rows()
    assert tg.median == 5.0
    assert tr.recovered == [8.0, 10.0] and tr.median == 9.0
    assert ba.Recovery("x", (None,)).median is None


def test_render_recovery_shows_failures_and_ratios() -> None:
    table = ba.render_recovery(_rows(), "torchrun")
    lines = table.splitlines()
    assert lines[0].split() == ["system", "runs", "recovered", "median", "s", "min-max", "s",
                                "vs", "torchrun"]
    assert lines[2].split() == ["trainguard", "3", "3/3", "5.00", "4.00-6.00", "0.56x"]
    assert lines[3].split() == ["torchrun", "3", "2/3", "9.00", "8.00-10.00", "1.00x"]
    assert "torchrun: run 2: no step after the kill" in table


@pytest.mark.parametrize(("tg", "tr", "ok"), [
    ((4.0,), (5.0,), True),
    ((6.0,), (5.0,), False),
    ((None,), (5.0,), False),
    ((4.0, None, 4.0), (5.0,), False),   # one of ours did not recover: a failure, not hidden
    ((6.0,), (None,), True),     # torchrun never recovered
])
def test_recovery_verdict(tg: tuple[float | None, ...], tr: tuple[float | None, ...],
                          ok: bool) -> None:
    rows = [ba.Recovery("trainguard", tg), ba.Recovery("torchrun", tr)]
    assert ba.recovery_verdict(rows, "trainguard", "torchrun").ok is ok


def test_latency_verdicts_and_rendering() -> None:
    dists = {"out": ba.Dist(1000, 0.02, 0.099, 0.3), "sdk": ba.Dist(1000, 0.02, 0.1, 0.1),
             "none": None}
    assert [v.ok for v in ba.latency_verdicts(dists, 100.0)] == [True, False, False]
    text = ba.render_latency(dists)
    assert "out: n=1000  p50 20.0 ms  p99 99.0 ms  max 300.0 ms" in text
    assert "none: no samples" in text


def test_to_json_nests_dataclasses() -> None:
    doc = ba.to_json({"recovery": _rows()[:1], "latency": {"a": ba.Dist(1, 0.1, 0.1, 0.1)}})
    assert doc["recovery"][0]["totals"] == [4.0, 6.0, 5.0]
    assert doc["latency"]["a"]["p99"] == 0.1


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--kill-step", "29"],
                                  ["--only", "nope"], ["--window", "0"]])
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        ba.parse_args(argv)
    assert exc.value.code == 2


def test_default_arguments_run_everything() -> None:
    cfg = ba.parse_args([])
    assert cfg.only == ba.SCENARIOS and cfg.repeats == 3 and cfg.latency_events >= 1000
