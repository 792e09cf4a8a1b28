"""A detector config whose ``peer_window_blocks`` is absurd (issue 26: 4,000,000,000 gave a
MemoryError traceback) is one error line naming the key, in a child with a memory limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from bounded import run_cli

from trainguard.detect.config import DetectorConfig
from trainguard.errors import ConfigError

T0 = 1_763_600_010


def _telemetry(path: Path, nodes: int = 4) -> Path:
    lines = [f'DCGM_FI_DEV_GPU_TEMP{{Hostname="n{n}",gpu="{g}"}} {40 + g} {T0 + 30 * i}'
             for i in range(100) for n in range(nodes) for g in range(4)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("blocks", [4_000_000_000, 2**63 - 1])
def test_absurd_peer_window_is_one_error_naming_the_key(tmp_path: Path, blocks: int) -> None:
    config = tmp_path / "det.toml"
    config.write_text(f"[detect]\npeer_window_blocks = {blocks}\n")
    result = run_cli("detect", str(_telemetry(tmp_path / "t.om")), "--config", str(config),
                     timeout_s=60, max_memory_mib=1536)
    assert not result.timed_out
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "peer_window_blocks" in lines[0]


def test_peer_window_history_is_counted_by_the_memory_guard() -> None:
    # 1,000 nodes x 50,000 blocks of 8-byte history (x3 copies) is 1.2 GB: over a 1 GiB limit
    from trainguard.detect.memory import check_detector_memory
    from trainguard.telemetry.limits import MemoryLimitError

    cfg = DetectorConfig(peer_window_blocks=50_000, max_memory_bytes=1 << 30)

    class _Tel:
        metrics = ()
        nodes = tuple(f"n{i}" for i in range(1000))
        step_s = 30

    with pytest.raises(MemoryLimitError, match="peer_window_blocks"):
        check_detector_memory(_Tel(), cfg, cfg.block_s * 60)  # type: ignore[arg-type]


def test_peer_window_alone_over_the_limit_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"detect\.peer_window_blocks"):
        DetectorConfig(peer_window_blocks=4_000_000_000)
    DetectorConfig(peer_window_blocks=15)  # the default fits
