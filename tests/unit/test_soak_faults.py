"""The pure parts of benchmarks/soak_faults.py: judging a run's summary, aggregating runs into
rows, the table, and the options. No process or cluster is started."""

from __future__ import annotations

from typing import Any

import pytest
from script_module import load_script

sf = load_script("benchmarks/soak_faults.py", "soak_faults")


def summary(attempts: int = 2, status: str = "succeeded",
            excluded: tuple[str, ...] = ()) -> dict[str, Any]:
    runs = [{"index": i, "failure": {"kind": "hang"}} for i in range(attempts - 1)]
    return {"status": status, "attempts": [*runs, {"index": attempts - 1}],
            "exclusions": [{"node": n, "reason": "x"} for n in excluded]}


def test_one_relaunch_with_the_expected_exclusion_is_recovered() -> None:
    assert sf.judge("kill", summary()) == ""
    assert sf.judge("xid", summary(excluded=("host2",))) == ""
    assert sf.judge("fenced", summary(excluded=("host2",))) == ""


@pytest.mark.parametrize(("fault", "s", "why"), [
    ("kill", summary(attempts=3), "3 attempts (hang, hang)"),
    ("kill", summary(attempts=1), "1 attempts (none failed)"),
    ("stop", summary(status="failed"), "status failed"),
    ("xid", summary(), "excluded [], expected ['host2']"),
    ("kill", summary(excluded=("host2",)), "excluded ['host2'], expected []"),
])
def test_what_is_not_one_relaunch_says_why(fault: str, s: dict[str, Any], why: str) -> None:
    assert why in sf.judge(fault, s)


def test_aggregate_counts_runs_losses_and_times_per_fault_and_backend() -> None:
    out = sf.Outcome
    rows = sf.aggregate([
        out("kill", "local", True, True, 4.0), out("kill", "local", True, True, 2.0),
        out("kill", "local", False, False, 9.0, "3 attempts (hang, hang)"),
        out("controller", "local", True, None, 1.5),
        out("kill", "slurm", True, True, None),
    ])
    kill, ctl, slurm = rows
    assert (kill.fault, kill.backend, kill.runs, kill.recovered) == ("kill", "local", 3, 2)
    assert (kill.loss_equal, kill.loss_compared) == (2, 3)
    assert (kill.median_s, kill.max_s) == (4.0, 9.0)
    assert kill.failures == ("run 3: 3 attempts (hang, hang)",)
    assert (ctl.loss_compared, ctl.median_s) == (0, 1.5)
    assert (slurm.median_s, slurm.max_s) == (None, None)
    assert not sf.all_recovered(rows)
    assert sf.all_recovered(rows[1:])


def test_the_table_has_a_line_per_row_and_one_per_failure() -> None:
    rows = sf.aggregate([sf.Outcome("kill", "local", True, True, 3.25),
                         sf.Outcome("lost", "slurm", False, True, 12.0, "status failed"),
                         sf.Outcome("controller", "local", True, None, 0.5)])
    text = sf.render(rows)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["fault", "backend", "runs"]
    assert lines[1].split() == ["kill", "local", "1", "1/1", "1/1", "3.2", "3.2"]
    assert lines[2].split()[:5] == ["lost", "slurm", "1", "0/1", "1/1"]
    assert lines[3].split()[:4] == ["controller", "local", "1", "1/1"]
    assert "n/a" in lines[3]
    assert "lost/slurm run 1: status failed" in text


def test_options() -> None:
    cfg = sf.parse_args([])
    assert (cfg.repeats, cfg.faults, cfg.backend, cfg.json) == (10, sf.LOCAL_FAULTS, "local",
                                                                 False)
    cfg = sf.parse_args(["--repeats", "1", "--faults", "kill, lost,kill", "--backend", "both",
                         "--json"])
    assert (cfg.repeats, cfg.faults, cfg.backend, cfg.json) == (1, ("kill", "lost"), "both",
                                                                 True)
    assert sf.plan(cfg, slurm_ok=True) == [("local", "kill"), ("local", "lost"),
                                           ("slurm", "kill"), ("slurm", "lost")]
    assert sf.plan(cfg, slurm_ok=False) == [("local", "kill"), ("local", "lost")]
    only_slurm = sf.parse_args(["--backend", "slurm", "--faults", "xid,kill"])
    assert sf.plan(only_slurm, slurm_ok=True) == [("slurm", "kill")]


@pytest.mark.parametrize("argv", [["--faults", "reboot"], ["--faults", ","], ["--repeats", "0"],
                                  ["--backend", "k8s"], ["--steps", "10"]])
def test_bad_options_are_one_line_errors(argv: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sf.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("usage:") or "error:" in err[-1]
    assert "Traceback" not in "\n".join(err)
