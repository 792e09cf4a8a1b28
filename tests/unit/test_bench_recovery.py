"""The pure parts of benchmarks/bench_recovery.py: splitting a recovery into stages, torchrun's
log, loss logs, process trees and the report. No processes are started."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from script_module import load_script

br = load_script("benchmarks/bench_recovery.py", "bench_recovery")


def _phase(rank: int, name: str, start: float, end: float) -> dict[str, Any]:
    return {"t": end, "rank": rank, "kind": "phase", "name": name, "start": start, "end": end}


# Attempt 1 of a 2-rank run relaunched at t=105: rank 1 is the slower one at every phase.
RESTART_EVENTS = {
    0: [_phase(0, "imports", 105.0, 108.0), _phase(0, "dist_init", 108.0, 108.5),
        {"t": 108.6, "rank": 0, "kind": "resume", "step": 30},
        _phase(0, "ckpt_load", 108.6, 108.7), _phase(0, "first_step", 108.7, 108.8),
        {"t": 108.8, "rank": 0, "kind": "step", "step": 30}],
    1: [_phase(1, "imports", 105.1, 108.4), _phase(1, "dist_init", 108.4, 108.5),
        _phase(1, "ckpt_load", 108.65, 108.75), _phase(1, "first_step", 108.75, 108.9)],
}  # fmt: skip


def test_trainguard_split_adds_up_to_the_total() -> None:
    summary = {"attempts": [
        {"started": 50.0, "ended": 101.0, "failed_at": 100.5},
        {"started": 102.0, "ended": 120.0, "failed_at": None},
    ]}  # fmt: skip
    split = br.trainguard_split(summary, RESTART_EVENTS, 100.0)
    stages = [split.stage(c) for c in br.COLUMNS]
    assert stages == pytest.approx([0.5, 0.5, 1.0, 6.65, 0.1, 0.15])
    assert split.total_s == pytest.approx(8.9) == pytest.approx(sum(stages))
    assert split.restarts == 1 and split.merged == ()


def test_trainguard_split_without_failed_at_merges_detection_into_teardown() -> None:
    summary = {"attempts": [{"started": 50.0, "ended": 101.0}, {"started": 102.0}]}
    split = br.trainguard_split(summary, RESTART_EVENTS, 100.0)
    assert split.detection_s is None and split.teardown_s == pytest.approx(1.0)
    assert split.merged == ("teardown",)


def test_trainguard_split_needs_a_restart() -> None:
    with pytest.raises(ValueError, match="no restart"):
        br.trainguard_split({"attempts": [{"started": 1.0, "ended": 2.0}]}, {}, 1.5)


@pytest.mark.parametrize(
    ("points", "stages", "merged"),
    [
        ((1, 2, 3, 4, 5, 6), [1, 1, 1, 1, 1, 1], ()),
        ((None, 2, 3, None, 5, 6), [None, 2, 1, None, 2, 1], ("teardown", "ckpt_load")),
        ((1, 2, 3, 4, 5, None), [1, 1, 1, 1, 1, None], ()),
    ],
)
def test_split_timeline(
    points: tuple[float | None, ...], stages: list[float | None], merged: tuple[str, ...]
) -> None:
    split = br.split_timeline(br.Timeline(0.0, *points), 2)
    assert [split.stage(c) for c in br.COLUMNS] == stages
    assert split.merged == merged and split.restarts == 2
    assert split.total_s == points[-1]


def test_phase_spans_take_the_earliest_start_and_latest_end() -> None:
    spans = br.phase_spans(RESTART_EVENTS)
    assert spans["imports"] == br.Span(105.0, 105.1, 108.4)
    assert spans["first_step"] == br.Span(108.7, 108.75, 108.9)


def _stamp(month: int, day: int, hms: str, us: int, year: int = 2026) -> float:
    h, m, s = map(int, hms.split(":"))
    return datetime(year, month, day, h, m, s, us).timestamp()


TORCHRUN_LOG = """\
W1121 14:34:38.552000 19989 torch/distributed/run.py:874] *****
step 30 loss 2.5791
[rank0]: RuntimeError: [pair.cc:537] Read error [127.0.0.1]:16278: Connection reset by peer.
W1121 14:34:44.786000 19989 torch/distributed/elastic/multiprocessing/api.py:1028] Sending \
process 20410 closing signal SIGTERM
E1121 14:34:44.819000 19989 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: -9) local_rank: 1 (pid: 20411) of binary: /usr/bin/python3
"""


def test_parse_glog_reads_local_time_and_skips_worker_output() -> None:
    near = _stamp(11, 21, "14:34:44", 0)
    lines = br.parse_glog(TORCHRUN_LOG, near)
    assert [ln.level for ln in lines] == ["W", "W", "E"]
    assert lines[1].t == pytest.approx(_stamp(11, 21, "14:34:44", 786000))
    assert lines[1].message.startswith("Sending process 20410")


def test_parse_glog_picks_the_year_nearest_the_fault() -> None:
    near = _stamp(1, 1, "00:00:01", 0, year=2027)  # just after new year
    (line,) = br.parse_glog("W1231 23:59:59.500000 1 run.py:1] x", near)
    assert line.t == pytest.approx(_stamp(12, 31, "23:59:59", 500000, year=2026))


def test_torchrun_split() -> None:
    fault = _stamp(11, 21, "14:34:44", 700000)
    events = {r: [{**rec, **{k: rec[k] - 100.0 + fault for k in ("start", "end", "t")
                             if k in rec}} for rec in recs]
              for r, recs in RESTART_EVENTS.items()}  # the restart 5 s after the fault
    split = br.torchrun_split(TORCHRUN_LOG, events, 1, fault)
    assert split.detection_s == pytest.approx(0.086, abs=1e-6)
    assert split.teardown_s == pytest.approx(0.033, abs=1e-6)
    assert split.backoff_s == pytest.approx(5.0 - 0.119, abs=1e-6)  # until the first process
    assert split.relaunch_s == pytest.approx(3.65) and split.total_s == pytest.approx(8.9)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", (None, None)),
        ("E1121 14:34:44.819000 1 api.py:1] failed (exitcode: 1) local_rank: 0 (pid: 7) of x",
         (0.819, 0.819)),  # no worker left to close: one line for both
        ("W1121 14:34:43.000000 1 api.py:1] Sending process 3 closing signal SIGTERM",
         (None, None)),  # before the fault
    ],
)
def test_torchrun_detection(text: str, expected: tuple[float | None, float | None]) -> None:
    fault = _stamp(11, 21, "14:34:44", 0)
    got = br.torchrun_detection(br.parse_glog(text, fault), fault)
    assert [None if t is None else round(t - fault, 6) for t in got] == list(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("0 4.2\n1 3.9\n", (1, "3.9")),
        ("0 4.2\n1 3.9\n2 3.", (1, "3.9")),  # step 2 is half written
        ("29 2.45\n30 2.57\n30 2.57\n", (30, "2.57")),
    ],
)
def test_last_loss(text: str, expected: tuple[int, str] | None) -> None:
    assert br.last_loss(text) == expected


def test_parse_events_skips_a_partial_line() -> None:
    assert br.parse_events('{"kind": "step", "step": 1}\n{"kind": "st') == [
        {"kind": "step", "step": 1}
    ]


def test_environ_has() -> None:
    blob = b"PATH=/bin\0RANK=1\0TORCHELASTIC_RESTART_COUNT=0\0"
    assert br.environ_has(blob, {"RANK": "1", "TORCHELASTIC_RESTART_COUNT": "0"})
    assert not br.environ_has(blob, {"RANK": "11"})
    assert not br.environ_has(b"LOCAL_RANK=1\0", {"RANK": "1"})


def test_descendants_of() -> None:
    parents = {10: 1, 11: 10, 12: 10, 13: 11, 20: 1}
    assert br.descendants_of(10, parents) == [11, 12, 13]
    assert br.descendants_of(13, parents) == []


def test_stat() -> None:
    assert br.stat([None]) is None
    assert br.stat([3.0, None, 1.0, 2.0]) == br.Stat(2.0, 1.0, 3.0, 3)


def _split(total: float, detection: float = 0.1) -> Any:
    line = br.Timeline(0.0, detection, detection + 0.1, detection + 0.2, total - 0.2,
                       total - 0.1, total)
    return br.split_timeline(line, 1)


def test_render_table_and_verdicts() -> None:
    tg = br.Row("trainguard crash", (_split(4.0), _split(5.0), _split(4.5)), (True, True, True))
    tr = br.Row("torchrun crash", (_split(4.2),), (True,))
    hang = br.Row("trainguard hang", (_split(12.0, detection=9.8),), (True,), compare=False)
    tr_hang = br.Row("torchrun hang", (), note="hang not detected in 40 s", runs=1)
    text = br.render_table([tg, tr, hang, tr_hang], 4.2)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["system", "runs", "restarts"]
    assert lines[2].split()[-3:] == ["4.50", "1.07x", "3/3"]
    assert lines[3].split()[-1] == "4.00-5.00"  # the range row under the medians
    hang_line = next(ln for ln in lines if ln.startswith("trainguard hang"))
    assert hang_line.split()[-2:] == ["-", "1/1"]
    assert lines[-2].split()[:4] == ["torchrun", "hang", "1", "-"]
    assert lines[-2].endswith("not detected in 40 s")
    checks = br.verdicts([tg], tr, hang, 5.0)
    assert [(v.ok, str(v).split()[0]) for v in checks] == [
        (True, "PASS"), (False, "FAIL"), (True, "PASS")
    ]  # fmt: skip
    assert "worst 5.00 s" in checks[0].text and "4.50 s vs 4.20 s" in checks[1].text
    assert "worst 9.80 s" in checks[2].text
