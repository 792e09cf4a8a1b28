"""`make test`'s two parts: `--alone` splits the suite by the `alone` marker, and
scripts/pytest_parts.sh runs both parts and keeps the first failing part's status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIXED = "tests/unit/check/test_check_probes_cpu.py"  # one test of five is marked alone


def _collected(mode: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                        f"--alone={mode}", MIXED], capture_output=True, text=True, cwd=ROOT,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return [line.split("::")[1] for line in r.stdout.splitlines() if "::" in line]


def test_alone_splits_the_suite_by_the_marker() -> None:
    every = _collected("with")
    only = _collected("only")
    without = _collected("without")
    assert only == ["test_a_cpu_hog_pinned_to_the_probes_core_lowers_cpu_gemm"]
    assert without == [t for t in every if t not in only] and len(without) == len(every) - 1


@pytest.mark.parametrize(("parallel", "alone", "status"), [
    (0, 0, 0),
    (0, 5, 0),  # the arguments chose no alone test
    (5, 0, 0),  # ... or only alone tests
    (5, 5, 5),  # nothing at all
    (1, 0, 1),
    (0, 1, 1),
    (2, 1, 2),  # the first failing part's status
    (5, 2, 2),
])
def test_both_parts_run_and_the_first_failure_is_the_status(
        tmp_path: Path, parallel: int, alone: int, status: int) -> None:
    calls = tmp_path / "calls"
    fake = tmp_path / "pytest"
    fake.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {calls}
case " $* " in *" --alone=only "*) exit {alone};; *) exit {parallel};; esac
""")
    fake.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "pytest_parts.sh"), str(fake), "3",
                        "-m", "not multihost"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == status, r.stderr
    assert calls.read_text().splitlines() == [
        "-q -n 3 --dist loadfile --alone=without -m not multihost",
        "-q --alone=only -m not multihost"]
