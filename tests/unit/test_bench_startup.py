"""The pure parts of benchmarks/bench_startup.py: medians, ratios and verdicts follow the
numbers, and the cases run the commands the targets are about."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("benchmarks/bench_startup.py", "bench_startup")


def test_medians_ratio_and_verdict(bench: ModuleType) -> None:
    case = bench.Case("x", ("true",), 0.3)
    row = bench.summarize(case, [(0.2, 0.1), (0.4, 0.3), (0.25, 0.2)])
    assert (row.wall_s, row.cpu_s) == (0.25, 0.2)
    assert row.ratio == pytest.approx(0.25 / 0.3) and row.verdict == "meets target"
    slow = bench.summarize(case, [(0.5, 0.4)])
    assert slow.ratio == pytest.approx(0.5 / 0.3) and slow.verdict == "over target"
    base = bench.summarize(bench.Case("b", ("true",)), [(0.01, 0.01)])
    assert base.ratio is None and base.verdict == "baseline"


def test_the_table_has_one_line_per_case(bench: ModuleType) -> None:
    rows = [bench.Row("trainguard --help", 0.21, 0.2, 0.3), bench.Row("python", 0.01, 0.01, None)]
    lines = bench.table(rows).splitlines()
    assert len(lines) == 3
    assert "0.210" in lines[1] and "0.70" in lines[1] and "meets target" in lines[1]
    assert lines[2].rstrip().endswith("baseline")


def test_the_cases_cover_the_targets_and_the_old_start_up(bench: ModuleType,
                                                          tmp_path: Path) -> None:
    cases = {c.name: c for c in bench.cases(tmp_path / "small.log")}
    assert cases["trainguard --help"].target_s == 0.3
    classify = cases["trainguard logs classify <small file>"]
    assert classify.target_s == 0.5 and classify.argv[-1] == str(tmp_path / "small.log")
    eager = cases["import every command module (the old start-up)"].argv[-1]
    assert "trainguard.cli.run" in eager and "trainguard.cli.logs" in eager
