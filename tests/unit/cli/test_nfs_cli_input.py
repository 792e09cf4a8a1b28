"""`trainguard nfs diagnose` on hostile or mistaken input: one error line for endless or giant
files, output linear in the mounts when thousands share one transport, quoted mount paths."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from trainguard.cli.main import app
from trainguard.nfs import escape_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nfs"))
from nfs_builder import Mount, render
from test_nfs_cli import one_error_line

runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["nfs", "diagnose", *args])


def test_dev_zero_is_one_error_line() -> None:
    result = invoke("--mountstats", "/dev/zero", "--mountstats", "/dev/zero")
    assert result.exit_code == 2
    message = one_error_line(result)
    assert "cannot read /dev/zero: not a regular file (a character device)" in message


def test_giant_line_is_one_error_line(tmp_path: Path) -> None:
    capture = tmp_path / "one-line.mountstats"
    capture.write_text("x" * 200_000)
    result = invoke("--mountstats", str(capture))
    assert result.exit_code == 2
    assert "one-line.mountstats:1: line of 200,000 characters" in one_error_line(result)


def _capture(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"many-{n}.mountstats"
    path.write_text(render(*(Mount(mountpoint=f"/mnt/vol{i:05d}", device=f"filer:/vol{i:05d}")
                             for i in range(n))))
    return path


# (the text table costs Rich ~15 ms a mount, so the text case uses fewer mounts; the notes that
# made it quadratic are the same in both forms)
@pytest.mark.parametrize(("fmt", "small", "large"), [("json", 100, 2000), ("text", 30, 300)])
def test_output_is_linear_in_mounts_sharing_one_transport(tmp_path: Path, fmt: str, small: int,
                                                          large: int) -> None:
    # Mounts of one server print identical xprt: lines; naming every other mount under each
    # one made the report quadratic (382 MB for 2,000 mounts).
    extra = ["--json"] if fmt == "json" else []
    per_mount = {}
    for n in (small, large):
        result = invoke("--mountstats", str(_capture(tmp_path, n)), *extra)
        assert result.exit_code == 0, result.output[-2000:]
        per_mount[n] = len(result.stdout) / n
    assert per_mount[large] < 1.1 * per_mount[small], per_mount
    assert per_mount[large] < (6000 if fmt == "json" else 3000), per_mount
    if fmt == "json":
        doc = json.loads(result.stdout)
        [group] = doc["transport_groups"]
        assert len(group["mounts"]) == large
        assert {len(m["notes"]) for m in doc["mounts"]} == {3}
    else:
        out = " ".join(result.stdout.split())
        others = f"{large - 1} other mounts of the same server (transport group 1)"
        assert out.count(others) == large
        assert out.count(f"transport group 1: {large} mounts share one transport") == 1
        assert out.count("transport: 1 x tcp") == 1  # the shared transport, printed once


def test_mount_paths_are_decoded_and_quoted_in_commands(tmp_path: Path) -> None:
    hostile = "/mnt/my data/$(touch pwned)"
    capture = tmp_path / "escaped.mountstats"
    capture.write_text(render(Mount(mountpoint=escape_path(hostile))))
    result = invoke("--mountstats", str(capture), "--mount", hostile)
    assert result.exit_code == 0, result.output
    [command] = [ln.strip()[2:] for ln in result.stdout.splitlines()
                 if ln.strip().startswith("$ trainguard")]
    assert shlex.split(command) == ["trainguard", "nfs", "diagnose", "--mount", hostile,
                                    "--interval", "30"]
    assert "\\040" not in command
