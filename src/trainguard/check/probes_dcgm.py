"""The dcgm probe: NVIDIA DCGM's quick diagnostic, ``dcgmi diag -r 1``, where it is installed.

The table ``dcgmi`` prints is read roughly: every row whose result column starts with Pass,
Fail, Skip or Warn is a test; a Fail is a hard problem
(:data:`~trainguard.check.probe_base.HARD_FAIL_FACT`). The start of the raw output is kept
as a fact, since the table's layout changes between DCGM versions.
"""

from __future__ import annotations

import re
import shutil
import time
from collections import Counter

from trainguard.check.model import ProbeResult, Status
from trainguard.check.probe_base import (
    HARD_FAIL_FACT,
    ProbeParams,
    describe,
    errored,
    figure,
    skipped,
)
from trainguard.check.probe_proc import run_command
from trainguard.textsafe import terminal_safe

DCGM_COMMAND = ("dcgmi", "diag", "-r", "1")
EXCERPT_CHARS = 2000
_ROW = re.compile(r"^\s*\|\s*(?P<name>[^|]*?)\s*\|\s*(?P<result>pass|fail|skip|warn)\w*\b",
                  re.IGNORECASE | re.MULTILINE)


def parse_dcgm_diag(text: str) -> list[tuple[str, str]]:
    """(test name, ``pass``/``fail``/``skip``/``warn``) for each result row of the table."""
    return [(m.group("name").strip(" -"), m.group("result").lower())
            for m in _ROW.finditer(text)]


def dcgm(params: ProbeParams, executable: str | None = None) -> ProbeResult:
    """Run ``dcgmi diag -r 1`` within the probe's time limit (``executable``: which dcgmi)."""
    exe = executable or shutil.which(DCGM_COMMAND[0])
    if exe is None:
        return skipped("dcgm", params, "dcgmi not installed")
    started = time.monotonic()
    try:
        # its own process group, killed whole at the limit: nothing dcgmi started lingers
        done = run_command([exe, *DCGM_COMMAND[1:]], params.time_limit_s * 0.9)
    except OSError as exc:
        return errored("dcgm", params, f"dcgmi: {describe(exc)}", time.monotonic() - started)
    if done.timed_out:
        return errored("dcgm", params, f"dcgmi diag timed out after "
                       f"{params.time_limit_s * 0.9:.0f} s", time.monotonic() - started)
    output = terminal_safe(done.output, keep_newlines=True)
    rows = parse_dcgm_diag(output)
    excerpt = ("output", output[:EXCERPT_CHARS])
    if not rows:
        last = output.strip().splitlines()[-1:] or ["no output"]
        return errored("dcgm", params, f"dcgmi diag exited {done.returncode} without a result "
                       f"table: {last[0][:200]}", time.monotonic() - started, (excerpt,))
    counts = Counter(result for _, result in rows)
    facts = [("results", ", ".join(f"{counts[k]} {k}" for k in ("pass", "fail", "warn", "skip"))),
             ("exit_code", str(done.returncode))]
    facts.extend((HARD_FAIL_FACT, f"DCGM {name}: fail") for name, result in rows
                 if result == "fail")
    facts.extend(("warning", f"DCGM {name}: warn") for name, result in rows if result == "warn")
    facts.append(excerpt)
    return ProbeResult("dcgm", params.host, Status.OK,
                       figures=(figure("dcgm_failed", counts["fail"]),),
                       duration_s=time.monotonic() - started, facts=tuple(facts))


__all__ = ["DCGM_COMMAND", "dcgm", "parse_dcgm_diag"]
