"""The pure parts of benchmarks/bench_checkpoint.py: the model-shaped state, the verdicts on
issue #7's three targets, the table; and one tiny end-to-end run on tmp_path."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("benchmarks/bench_checkpoint.py", "bench_checkpoint")


def _result(save: float, blocking: float, tsave_blocking: float, raw: float, load: float,
            tload: float) -> dict[str, Any]:
    def row(name: str, b: float, t: float, best: float | None = None) -> dict[str, Any]:
        return {"method": name, "blocking_s": b, "total_s": t, "runs": 3,
                "best_total_s": t if best is None else best}

    return {"bytes": 2 << 30, "streams": 8, "stripe_bytes": 16 << 20, "repeats": 3,
            "first_save": {"blocking_s": 1.0, "total_s": 2.0},
            "timings": {"raw write": row("raw write", raw * 2, raw * 2, best=raw),
                        "raw write O_DIRECT": row("raw write O_DIRECT", 0.5, 0.5),
                        "torch.save": row("torch.save", tsave_blocking, tsave_blocking + 0.5),
                        "torch.load": row("torch.load", 0.0, tload),
                        "trainguard save": row("trainguard save", blocking, save),
                        "trainguard load": row("trainguard load", 0.0, load)}}


def test_model_state_has_the_asked_size_and_transformer_shapes(bench: ModuleType) -> None:
    size = (64 << 20) + 3 * 4096 * 4 + 1000  # one 4096x4096 matrix, a LayerNorm, a tail
    state = bench.model_state(size)
    assert bench.state_bytes(state) == size
    shapes = {tuple(t.shape) for t in state["model"].values()}
    assert (4096,) in shapes and any(len(s) == 2 and s[1] == 4096 for s in shapes)
    assert state["step"] == 1000


def test_verdicts_compare_against_the_fastest_raw_write(bench: ModuleType) -> None:
    # median raw 2.0 s but fastest 1.0 s: 1.2 s end to end is 83% of the fastest -> met
    met = bench.verdicts(_result(save=1.2, blocking=0.3, tsave_blocking=1.0, raw=1.0, load=1.5,
                                 tload=2.0))
    assert [m for _, m, _ in met] == [True, True, True]
    assert "3.3x" in met[0][2] and "83%" in met[1][2]
    missed = bench.verdicts(_result(save=1.3, blocking=0.6, tsave_blocking=1.0, raw=1.0,
                                    load=2.1, tload=2.0))
    assert [m for _, m, _ in missed] == [False, False, False]


def test_render_names_every_method_and_the_verdicts(bench: ModuleType) -> None:
    text = bench.render(_result(save=1.2, blocking=0.3, tsave_blocking=1.0, raw=1.0, load=1.5,
                                tload=2.0))
    for name in ("raw write O_DIRECT", "torch.save", "trainguard save", "torch.load",
                 "trainguard load", "device ceiling", "[met] blocking"):
        assert name in text


def test_a_tiny_run_measures_every_method_and_cleans_up(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--size", "4MiB", "--repeats", "1", "--dir", str(tmp_path / "b"),
                       "--json"]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert result["bytes"] == 4 << 20
    assert {"raw write", "torch.save", "torch.load", "trainguard save",
            "trainguard load"} <= set(result["timings"])
    assert not list((tmp_path / "b").iterdir())


def test_a_bad_size_is_a_usage_error(bench: ModuleType, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    assert bench.main(["--size", "lots", "--dir", str(tmp_path)]) == 2
    assert "bad size" in capsys.readouterr().err
