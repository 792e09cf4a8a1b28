"""`trainguard detect` on the hostile inputs of issue #16, each in a child process with a memory
limit (RLIMIT_AS) and a timeout: a regression fails here instead of eating the machine.

Each input once took unbounded time or memory, or ended in a traceback; now each gives a result
with a warning line, or exactly one error line and exit status 2.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from bounded import Bounded, run_cli

T0 = 1_763_600_010  # a multiple of 30 s
MEMORY_MIB = 1536
"""Address space for the child: plenty for these small files, far below what the bugs took."""


def _gpu_lines(nodes: int = 4, gpus: int = 4, steps: int = 100) -> list[str]:
    return [f'DCGM_FI_DEV_GPU_TEMP{{Hostname="n{n}",gpu="{g}"}} {40 + g} {T0 + 30 * i}'
            for i in range(steps) for n in range(nodes) for g in range(gpus)]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _detect(*args: str, timeout_s: float = 60) -> Bounded:
    result = run_cli("detect", *args, timeout_s=timeout_s, max_memory_mib=MEMORY_MIB)
    assert not result.timed_out, f"still running after {timeout_s} s"
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result


def _one_error(result: Bounded, code: int = 2) -> str:  # input it cannot use: 2
    assert result.returncode == code, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]


def test_node_exporter_only(tmp_path: Path) -> None:
    lines = ["# TYPE node_load1 gauge"] + [
        f'node_load1{{instance="10.0.0.{n}:9100"}} {1 + 0.1 * (i % 7)} {T0 + 30 * i}'
        for i in range(600) for n in range(8)]
    result = _detect(str(_write(tmp_path / "node.om", lines)), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warning: no per-GPU series" in result.stderr


@pytest.mark.parametrize("stamp", ["1e20", "-1e18", "NaN", "1e300", "+Inf"])
def test_one_absurd_timestamp_is_dropped_and_reported(tmp_path: Path, stamp: str) -> None:
    bad = f'DCGM_FI_DEV_GPU_TEMP{{Hostname="n0",gpu="0"}} 41 {stamp}'
    result = _detect(str(_write(tmp_path / "t.om", [*_gpu_lines(), bad])), timeout_s=30)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warning: 1 samples dropped: 1 with a timestamp" in result.stderr
    assert "4 nodes, 1 metrics, 1,600 samples" in result.stdout


def test_many_distinct_nodes_are_refused_before_allocating(tmp_path: Path) -> None:
    # One sample per node gives no spacing (step 1 s): 30k nodes x a day wanted ~19 GiB.
    lines = [f'DCGM_FI_DEV_GPU_TEMP{{Hostname="h{n}",gpu="0"}} 40 {T0 + 3 * n}'
             for n in range(30_000)]
    line = _one_error(_detect(str(_write(tmp_path / "many.om", lines))))
    assert "30,000 series on 89,998 time steps" in line
    assert "--max-memory" in line and "--step" in line


def test_many_nodes_with_a_step_hit_the_peer_comparison_limit(tmp_path: Path) -> None:
    lines = [f'DCGM_FI_DEV_GPU_TEMP{{Hostname="h{n}",gpu="0"}} 40 {T0 + 30 * i}'
             for n in range(20_000) for i in range(2)]
    line = _one_error(_detect(str(_write(tmp_path / "many.om", lines))))
    assert "comparing 20,000 nodes with each other" in line and "--max-memory" in line
    # and the limit is the user's to raise: a bad size is one error line too
    line = _one_error(_detect(str(tmp_path / "many.om"), "--max-memory", "lots"))
    assert "bad size 'lots'" in line


def test_ten_megabyte_label_value(tmp_path: Path) -> None:
    huge = 'DCGM_FI_DEV_GPU_TEMP{Hostname="n0",gpu="0",x="' + "a" * 10_000_000 + f'"}} 41 {T0}'
    result = _detect(str(_write(tmp_path / "label.om", [*_gpu_lines(), huge])), timeout_s=30)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warning: 1 malformed OpenMetrics lines skipped" in result.stderr
    assert "line longer than 65536 bytes" in result.stderr


def test_gzip_of_newlines(tmp_path: Path) -> None:
    # 256 MiB of newlines in a 256 KB gzip: it used to run for minutes, a line at a time.
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    mib = b"\n" * (1 << 20)
    path = tmp_path / "blank.om.gz"
    path.write_bytes(b"".join([comp.compress(mib) for _ in range(256)] + [comp.flush()]))
    line = _one_error(_detect(str(path), timeout_s=30))
    assert "blank.om.gz: decompresses to more than" in line and "250x its size" in line
