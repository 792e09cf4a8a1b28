"""`trainguard trace show` and `trainguard diagnose hang|stragglers` on run directories built
here with the real writers (state files, trace records)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.trace.model import OpTime, TraceWindow
from trainguard.trace.statefile import StateWriter

runner = CliRunner()


def _run(tmp: Path, slow_rank: int | None = None, hung: int | None = None) -> Path:
    """A 3-rank attempt (node_a: ranks 0, 1; node_b: rank 2): 24 trace windows each, and
    state files where every rank but `hung` waits in all_gather #101."""
    run = tmp / "run"
    rng = random.Random(1)
    for rank, node in ((0, "node_a"), (1, "node_a"), (2, "node_b")):
        d = run / "attempts" / "0" / node
        d.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"t": 1.0, "rank": rank, "kind": "step", "step": 0})]
        for i in range(24):
            work = 0.040 * (1.5 if rank == slow_rank and i >= 6 else 1.0) * rng.uniform(0.97, 1.03)
            step = 0.070 if slow_rank is None or i < 6 else 0.040 * 1.5 + 0.01
            w = TraceWindow(rank, 1000.0 + 5 * i, 1005.0 + 5 * i, 70, step * 70,
                            (step - work) * 70,
                            spans={"data": OpTime(70, 0.001 * 70)},
                            collectives={"all_gather": OpTime(140, (step - work) * 70, 1 << 20)},
                            first_step=70 * i + 1, last_step=70 * i + 70)
            lines.append(json.dumps({"t": w.end, "kind": "trace", **w.to_record()}))
        lines.append("{torn")  # a rank killed mid-write: the last line is not an error
        (d / f"rank{rank}.events.jsonl").write_text("\n".join(lines))
        sw = StateWriter(d / f"rank{rank}.trace", rank)
        slot = sw.group("world", 3)
        sw.enter(slot, 100, "all_gather", 4096, 1100.0)
        sw.complete(slot, 100, 1100.1)
        if rank != hung:
            sw.enter(slot, 101, "all_gather", 4096, 1100.2)
        sw.step(1680, 1100.2)
        sw.close()
    return run


def test_trace_show_breaks_down_each_rank(tmp_path: Path) -> None:
    run = _run(tmp_path)
    r = runner.invoke(app, ["trace", "show", str(run), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1, 2]
    rank0 = doc["ranks"][0]
    assert rank0["steps"] == 24 * 70 and rank0["node"] == "node_a"
    assert rank0["step_s"] == pytest.approx(0.070)
    assert rank0["state"]["groups"]["world"]["entered_seq"] == 101
    r = runner.invoke(app, ["trace", "show", str(run)])
    assert r.exit_code == 0 and "node_b" in r.output and "in all_gather #101" in r.output


def test_diagnose_hang_names_the_rank_that_never_entered(tmp_path: Path) -> None:
    run = _run(tmp_path, hung=1)
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--json", "--now"])
    assert r.exit_code == 1, r.output  # a finding
    doc = json.loads(r.output)
    assert doc["kind"] == "missing_ranks" and doc["seq"] == 101 and doc["waiting"] == [0, 2]
    assert [(c["rank"], c["node"]) for c in doc["culprits"]] == [(1, "node_a")]
    assert doc["origin"] == "attempt 0, state files, now" and doc["attempt"] == 0
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--now"])
    assert "rank 1 on node_a never entered all_gather #101" in r.output.replace("\n", " ")


def test_diagnose_hang_prefers_the_supervisors_diagnosis(tmp_path: Path) -> None:
    run = _run(tmp_path, hung=1)
    (run / "attempts" / "0" / "hang.json").write_text(json.dumps(
        {"kind": "missing_ranks", "summary": "from the supervisor", "culprits": [],
         "notes": []}))
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--json"])
    assert json.loads(r.output)["summary"] == "from the supervisor"
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--json", "--now"])
    assert json.loads(r.output)["culprits"][0]["rank"] == 1


def test_diagnose_stragglers_flags_the_slow_rank_only(tmp_path: Path) -> None:
    r = runner.invoke(app, ["diagnose", "stragglers", str(_run(tmp_path / "a", slow_rank=2)),
                            "--json"])
    assert r.exit_code == 1, r.output  # a finding
    doc = json.loads(r.output)
    assert [(s["rank"], s["host"], s["cause"]) for s in doc["stragglers"]] == [
        (2, "node_b", "compute")]
    assert doc["straggler_found"] is True and doc["conclusive"] is True
    r = runner.invoke(app, ["diagnose", "stragglers", str(_run(tmp_path / "b"))])
    assert r.exit_code == 0 and "no straggler in attempt 0" in r.output


@pytest.mark.parametrize("argv", [
    ["trace", "show"], ["diagnose", "hang"], ["diagnose", "stragglers"]])
def test_a_directory_that_is_not_a_run_is_one_clear_error(tmp_path: Path,
                                                          argv: list[str]) -> None:
    r = runner.invoke(app, [*argv, str(tmp_path)])
    assert r.exit_code == 2 and "not a trainguard run directory" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(app, [*argv, str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such run directory" in r.output
    run = _run(tmp_path / "x")
    r = runner.invoke(app, [*argv, str(run), "--attempt", "7"])
    assert r.exit_code == 2 and "no attempt 7" in r.output


def test_a_malformed_trace_record_is_reported_not_dropped_silently(tmp_path: Path) -> None:
    run = _run(tmp_path)
    events = run / "attempts" / "0" / "node_b" / "rank2.events.jsonl"
    events.write_text('{"kind": "trace", "rank": 2, "steps": "many"}\n' + events.read_text())
    r = runner.invoke(app, ["trace", "show", str(run)])
    assert r.exit_code == 0 and "malformed trace record" in r.output
    assert "steps must be an integer" in r.output


def _attempt_without_sdk(run: Path, attempt: int, hang: dict[str, object] | None) -> None:
    """An attempt of a script without the SDK: only rank logs (no events, no state files),
    and the supervisor's diagnosis when `hang` is given."""
    for rank, node in ((0, "n1"), (1, "n2")):
        d = run / "attempts" / str(attempt) / node
        d.mkdir(parents=True)
        (d / f"rank{rank}.log").write_text(f"step 3 loss 0.5 (rank {rank})\n")
    if hang is not None:
        (run / "attempts" / str(attempt) / "hang.json").write_text(json.dumps(hang))


_SAVED = {"attempt": 1, "kind": "unknown", "summary": "rank 1 on n2 is stopped",
          "culprits": [{"rank": 1, "node": "n2", "local_rank": 0, "gpu": "0", "pid": 42,
                        "process": "stopped", "reason": "its process is stopped (SIGSTOP)",
                        "stack_top": ["main (train.py:63)"]}], "notes": []}


@pytest.mark.parametrize("later", [1, 3])
def test_diagnose_hang_defaults_to_the_latest_attempt_that_hung(tmp_path: Path,
                                                                 later: int) -> None:
    run = tmp_path / "run"
    for i in range(later + 1):
        _attempt_without_sdk(run, i, {**_SAVED, "attempt": i} if i in (0, 1) else None)
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["hang"] is True and doc["attempt"] == 1 and doc["kind"] == "unknown"
    assert doc["culprits"][0]["rank"] == 1
    r = runner.invoke(app, ["diagnose", "hang", str(run)])
    assert r.exit_code == 1 and "attempt 1, the supervisor's" in r.output
    assert "rank 1 host n2" in r.output and "main (train.py:63)" in r.output


def test_diagnose_hang_reads_the_saved_diagnosis_of_a_run_without_the_sdk(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    _attempt_without_sdk(run, 0, {**_SAVED, "attempt": 0})
    _attempt_without_sdk(run, 1, None)
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--attempt", "0", "--json"])
    assert r.exit_code == 1, r.output
    assert json.loads(r.output)["summary"] == "rank 1 on n2 is stopped"
    # the attempt that did not hang says so, and the state files "now" are not made up
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--attempt", "1", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["hang"] is False
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--attempt", "1", "--now"])
    assert r.exit_code == 0 and "no rank reported collective state" in r.output


def test_a_run_that_never_hung_says_no_hang(tmp_path: Path) -> None:
    run = _run(tmp_path)  # state files where every rank waits, but no supervisor diagnosis
    r = runner.invoke(app, ["diagnose", "hang", str(run)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("no hang: no attempt of")
    assert "outside_collectives" not in r.output and "stuck_collective" not in r.output
    r = runner.invoke(app, ["diagnose", "hang", str(run), "--json"])
    doc = json.loads(r.output)
    assert doc["hang"] is False and doc["attempt"] is None


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"kind": "unknown"}',
                                     '{"kind": "x", "summary": "y", "culprits": [3]}'])
def test_a_damaged_hang_file_is_one_clear_error(tmp_path: Path, content: str) -> None:
    run = tmp_path / "run"
    _attempt_without_sdk(run, 0, None)
    (run / "attempts" / "0" / "hang.json").write_text(content)
    r = runner.invoke(app, ["diagnose", "hang", str(run)])
    assert r.exit_code == 2 and "hang.json" in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_trace_show_lists_ranks_of_a_run_without_the_sdk(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _attempt_without_sdk(run, 0, None)
    r = runner.invoke(app, ["trace", "show", str(run), "--json"])
    assert r.exit_code == 0, r.output
    assert [(x["rank"], x["node"], x["steps"]) for x in json.loads(r.output)["ranks"]] == [
        (0, "n1", 0), (1, "n2", 0)]


@pytest.mark.parametrize("width", [80, 120])
def test_trace_tables_fit_the_terminal(tmp_path: Path, width: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.cli import console

    run = _run(tmp_path, slow_rank=2)
    doc = json.loads(runner.invoke(app, ["diagnose", "stragglers", str(run), "--json"]).output)
    monkeypatch.setattr(console.out, "width", width)
    for argv, code in ((["trace", "show"], 0), (["diagnose", "stragglers"], 1)):
        r = runner.invoke(app, [*argv, str(run)])
        assert r.exit_code == code, r.output
        assert "…" not in r.output
        assert all(len(line.rstrip()) <= width for line in r.stdout.splitlines())
    tokens = r.stdout.split()
    for rank in doc["ranks"]:
        assert f"{rank['slowdown']:+.0%}" in tokens  # every percentage whole


# --- issue #28: which attempt `diagnose stragglers` reads --------------------------------------

def _short_attempt(run: Path, index: int) -> None:
    """An attempt that stopped 6 s in: one trace window per rank, inside the warm-up."""
    for rank, node in ((0, "node_a"), (1, "node_a"), (2, "node_b")):
        d = run / "attempts" / str(index) / node
        d.mkdir(parents=True, exist_ok=True)
        w = TraceWindow(rank, 2000.0, 2005.0, 70, 0.07 * 70, 0.03 * 70,
                        first_step=1, last_step=70)
        (d / f"rank{rank}.events.jsonl").write_text(
            json.dumps({"t": w.end, "kind": "trace", **w.to_record()}) + "\n")


def _flag(run: Path, index: int, rank: int = 2, slowdown: float = 0.4) -> None:
    """The supervisor's stragglers.json for `index`, as StragglerWatch writes it."""
    (run / "attempts" / str(index) / "stragglers.json").write_text(json.dumps(
        {"attempt": index, "evaluated_at": 1100.0, "stragglers": [
            {"rank": rank, "host": "node_b", "slowdown": slowdown, "status": "ongoing"}]}))


def test_stragglers_default_to_the_attempt_with_data_not_the_short_last_one(
        tmp_path: Path) -> None:
    run = _run(tmp_path, slow_rank=2)
    _flag(run, 0)
    _short_attempt(run, 1)
    r = runner.invoke(app, ["diagnose", "stragglers", str(run)])
    assert r.exit_code == 1, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith("read attempt 0 (the latest attempt whose trace windows compare")
    assert "passed over attempt 1: no rank has trace windows with steps after its first 10 s" \
        in " ".join(r.stdout.split())
    assert "straggler rank 2 (node_b)" in " ".join(r.stdout.split())
    assert "needs peers" not in r.output and "no straggler" not in r.output
    doc = json.loads(runner.invoke(app, ["diagnose", "stragglers", str(run), "--json"]).stdout)
    assert (doc["attempt"], doc["straggler_found"], doc["straggler_ranks"]) == (0, True, [2])


def test_the_short_attempt_alone_cannot_tell_and_says_why(tmp_path: Path) -> None:
    run = _run(tmp_path, slow_rank=2)
    _flag(run, 0)
    _short_attempt(run, 1)
    r = runner.invoke(app, ["diagnose", "stragglers", str(run), "--attempt", "1"])
    assert r.exit_code == 2, r.output
    line = _error_line(r.stderr)
    assert "cannot tell whether a rank straggles: attempt 1: no rank has trace windows with " \
        "steps after its first 10 s" in line and "too short to judge" in line
    assert "the supervisor flagged a straggler in attempt(s) 0" in line
    assert "needs peers" not in line and "no straggler" not in r.stdout
    doc = json.loads(runner.invoke(app, ["diagnose", "stragglers", str(run), "--attempt", "1",
                                         "--json"]).stdout)
    assert doc["attempt"] == 1 and doc["supervisor_flagged_attempts"] == [0]
    assert doc["cannot_tell"][0].startswith("attempt 1: no rank has trace windows")


def test_no_attempt_that_can_tell_is_exit_2_with_each_attempts_reason(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _short_attempt(run, 0)
    _attempt_without_sdk(run, 1, None)
    r = runner.invoke(app, ["diagnose", "stragglers", str(run)])
    assert r.exit_code == 2, r.output
    line = _error_line(r.stderr)
    assert "attempt 1: no trace windows" in line and "attempt 0: no rank has trace windows" \
        in line
    assert line.index("attempt 1:") < line.index("attempt 0:")  # latest first


def test_a_finding_of_the_supervisor_alone_is_a_straggler(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _short_attempt(run, 0)
    _flag(run, 0, slowdown=0.4)
    _short_attempt(run, 1)
    r = runner.invoke(app, ["diagnose", "stragglers", str(run)])
    assert r.exit_code == 1, r.output
    text = " ".join(r.stdout.split())
    assert text.startswith("read attempt 0 (the latest attempt the supervisor flagged a "
                           "straggler in); passed over attempt 1:")
    assert "(flagged by the supervisor while attempt 0 ran) rank 2 (node_b): +40% work per " \
        "step vs its peers (ongoing)" in text


def test_a_healthy_attempt_is_read_past_a_short_one_and_is_exit_0(tmp_path: Path) -> None:
    run = _run(tmp_path)
    _short_attempt(run, 1)
    (run / "attempts" / "1" / "stragglers.json").write_text("{torn")
    r = runner.invoke(app, ["diagnose", "stragglers", str(run)])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("read attempt 0") and "no straggler in attempt 0" in r.stdout
    assert "stragglers.json: unreadable" in r.stderr  # said, not fatal


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]
