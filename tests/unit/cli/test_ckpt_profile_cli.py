"""`trainguard ckpt profile` on a few MiB in tmp_path: the JSON document's fields, the human
report, and one clear line (no traceback, nothing left in --dir) for every user mistake."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

pytest.importorskip("torch")

import trainguard.ckpt.profile as profile_mod
from trainguard.cli.main import app

runner = CliRunner()
SMALL = ("--size", "2MiB", "--stripe", "256KiB", "--streams", "1,2", "--repeat", "1",
         "--device", "cpu")


def invoke(directory: Path | str, *args: str) -> Result:
    return runner.invoke(app, ["ckpt", "profile", "--dir", str(directory), *args])


def _one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("profile-json")
    result = invoke(directory, *SMALL, "--json")
    assert result.exit_code == 0, result.output
    assert list(directory.iterdir()) == []
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_json_fields(doc: dict[str, Any]) -> None:
    assert set(doc) == {"config", "nbytes", "tensors", "device", "filesystem", "direct_io",
                        "cold_reads", "wall_s", "streams", "baselines", "best", "comparisons",
                        "where_the_time_goes"}
    assert doc["config"] == {"dir": doc["config"]["dir"], "size_bytes": 2 << 20,
                             "streams": [1, 2], "stripe_bytes": 256 << 10, "repeat": 1,
                             "checksum": "crc32", "device": "cpu"}
    assert doc["device"] == "cpu" and doc["nbytes"] >= 2 << 20
    assert [s["streams"] for s in doc["streams"]] == [1, 2]
    for s in doc["streams"]:
        assert set(s) == {"streams", "files", "save_gbps", "load_gbps", "stages"}
        assert s["stages"]["d2h"] is None  # no GPU: n/a
        for name in ("blocking", "serialize", "copy", "checksum", "write", "fsync", "save",
                     "read", "verify", "load"):
            stage = s["stages"][name]
            assert set(stage) == {"median_s", "gbps", "samples_s"} and stage["median_s"] >= 0
    assert {"torch_total", "torch_load", "raw_total", "raw_read", "first_touch"} <= set(
        doc["baselines"])
    best = doc["best"]
    assert best["save_gbps"] == max(s["save_gbps"] for s in doc["streams"])
    assert best["load_gbps"] == max(s["load_gbps"] for s in doc["streams"])
    assert best["recommendation"] == (
        f"Checkpointer(streams={best['save_streams']}, stripe_bytes=256 << 10)")
    for c in doc["comparisons"]:
        assert set(c) == {"name", "operation", "baseline", "engine_s", "baseline_s", "speedup",
                          "ratio", "verdict", "summary"}
        assert c["ratio"] >= 1 and c["summary"].startswith(c["operation"])
    assert [w["operation"] for w in doc["where_the_time_goes"]] == ["save", "load"]


def test_human_report(tmp_path: Path) -> None:
    result = invoke(tmp_path, *SMALL)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "where the time goes" in text and "best: Checkpointer(streams=" in text
    assert "torch.save + fsync" in text and "raw write + fsync" in text
    assert "n/a" in text  # the D2H column without a GPU
    ratios = re.findall(r"(\d+\.\d+)x (faster|slower)", text)
    assert ratios and all(float(r) >= 1 for r, _ in ratios)
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_quiet_prints_the_best_configuration(tmp_path: Path) -> None:
    result = invoke(tmp_path, *SMALL, "--quiet")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"Checkpointer\(streams=[12], stripe_bytes=256 << 10\)\n", result.stdout)


@pytest.mark.parametrize(("sub", "message"), [
    ("afile/sub", "is not a directory (part of the path is a file)"),
    ("afile", "is not a directory"),
    ("missing", "does not exist"),
])
def test_unusable_directory(tmp_path: Path, sub: str, message: str) -> None:
    (tmp_path / "afile").write_text("x")
    result = invoke(tmp_path / sub, *SMALL)
    assert result.exit_code == 2  # the input (--dir, --size) is at fault
    line = _one_error_line(result)
    assert message in line and "--dir" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_larger_than_free_space(tmp_path: Path) -> None:
    result = invoke(tmp_path, "--size", "1PiB", "--device", "cpu")
    assert result.exit_code == 2  # the input (--dir, --size) is at fault
    line = _one_error_line(result)
    assert "not enough free space" in line and "use a smaller --size" in line
    assert list(tmp_path.iterdir()) == []


def test_larger_than_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_mod, "mem_available", lambda: 1 << 30)
    result = invoke(tmp_path, "--size", "1GiB", "--device", "cpu")
    assert result.exit_code == 2  # the input (--dir, --size) is at fault
    assert "not enough memory" in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "message"), [
    (["--size", "abc"], "--size: bad size 'abc'"),
    (["--size", "0"], "--size must be >= 1 MiB"),
    (["--size", "-1GiB"], "--size: bad size '-1GiB'"),
    (["--size", "1.5"], "--size: bad size '1.5': not a whole number of bytes"),
    (["--streams", "0"], "--streams must be integers in 1..1024"),
    (["--streams", "x"], "--streams must be comma separated integers"),
    (["--streams", ""], "--streams must be comma separated integers"),
    (["--streams", "1,,2"], "--streams must be comma separated integers"),
    (["--streams", "2,2"], "--streams has duplicates"),
    (["--stripe", "1000"], "--stripe must be a multiple of 4096"),
    (["--stripe", "big"], "--stripe: bad size 'big'"),
    (["--checksum", "md5"], "--checksum must be one of"),
    (["--device", "tpu"], "--device must be auto, cpu or cuda"),
])
def test_bad_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(tmp_path, *args)
    assert result.exit_code == 2
    assert message in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_cuda_without_cuda_is_a_usage_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = invoke(tmp_path, "--size", "2MiB", "--device", "cuda")
    assert result.exit_code == 2
    assert "--device is cuda but CUDA is not available" in _one_error_line(result)


def test_missing_dir_option_is_a_usage_error() -> None:
    result = runner.invoke(app, ["ckpt", "profile"])
    assert result.exit_code == 2
    assert "--dir" in result.output


@pytest.mark.parametrize(("measured", "code"), [(False, 2), (True, 1)])
def test_an_error_while_measuring_is_a_failed_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, measured: bool, code: int) -> None:
    """Checks that fail before any measurement are the input's fault (2); an I/O error once
    the profile is measuring is a failed outcome (1)."""
    import trainguard.cli.ckpt_profile as cli_mod
    from trainguard.errors import CheckpointError

    def run_profile(cfg: object, progress: Any = None) -> None:
        if measured:
            progress("generating 2 MiB of state", 0, 10)
        raise CheckpointError(f"profile failed in {tmp_path}: Input/output error")

    monkeypatch.setattr(cli_mod, "run_profile", run_profile)
    result = invoke(tmp_path, *SMALL)
    assert result.exit_code == code
    assert "Input/output error" in _one_error_line(result)
