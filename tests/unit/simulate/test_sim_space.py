"""`simulate` checks the disk before writing: the size estimate against real runs, refusal with
an injected free-space probe (nothing written), gzip by default, and a missing parent refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

import trainguard.simulate.space as space
from trainguard.cli.simulate import simulate
from trainguard.simulate import SimConfig, simulate_to_dir
from trainguard.simulate.space import NotEnoughSpace, check_space, estimate_bytes

app = typer.Typer()
app.command("simulate")(simulate)
app.command("noop")(lambda: None)  # a second command keeps "simulate" as a sub-command
runner = CliRunner()

SMALL = ["--nodes", "3", "--gpus-per-node", "2", "--days", "0.1", "--interval", "60"]


def one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(("nodes", "gpus", "days", "interval"), [
    (2, 8, 0.25, 30), (12, 1, 0.2, 30), (1, 16, 0.3, 15), (3, 2, 0.5, 120)])
def test_estimate_is_a_close_upper_bound_of_a_real_run(tmp_path: Path, compress: bool, nodes: int,
                                                       gpus: int, days: float,
                                                       interval: int) -> None:
    cfg = SimConfig(nodes=nodes, gpus_per_node=gpus, days=days, interval_s=interval, seed=5)
    real = simulate_to_dir(cfg, tmp_path / "sim", compress=compress).total_bytes
    estimate = estimate_bytes(cfg, compress=compress)
    # Never under (the check must not let a run fill the disk); text within 20 %, gzip (whose
    # ratio varies with the scrape interval) within 60 %, plus the fixed allowance.
    assert real <= estimate <= (1.6 if compress else 1.2) * real + 400_000, (real, estimate)


def test_default_size_matches_the_readme() -> None:
    cfg = SimConfig()  # the CLI's defaults: 63 x 8 GPUs, 7 days, 30 s
    assert 55e9 < estimate_bytes(cfg, compress=False) < 65e9
    assert 1.5e9 < estimate_bytes(cfg, compress=True) < 3e9


def test_library_refuses_before_writing(tmp_path: Path) -> None:
    cfg = SimConfig(nodes=2, gpus_per_node=2, days=0.1)
    asked: list[Path] = []

    def tiny(path: Path) -> int:
        asked.append(path)
        return 1000

    with pytest.raises(NotEnoughSpace, match=r"simulate\.out needs ~.* MB \(plus a 10% margin\), "
                                             r"0\.0 MB free on /"):
        simulate_to_dir(cfg, tmp_path / "out", free_space=tiny)
    assert asked == [tmp_path]  # measured where the new directory would go
    assert list(tmp_path.iterdir()) == []
    # the same run fits when the probe says there is room
    needed = estimate_bytes(cfg, compress=False)
    simulate_to_dir(cfg, tmp_path / "out", free_space=lambda _p: 2 * needed + 10**8)
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_margin_is_applied() -> None:
    cfg = SimConfig(nodes=2, gpus_per_node=2, days=0.1)
    needed = estimate_bytes(cfg, compress=True)
    exact = check_space(cfg, Path("/nonexistent/x"), compress=True, free=lambda _p: needed)
    assert exact.needed_bytes == needed and not exact.fits
    roomy = check_space(cfg, Path("/nonexistent/x"), compress=True,
                        free=lambda _p: int(needed * 1.2) + 10**8)
    assert roomy.fits and roomy.filesystem == "/"


def test_overwrite_counts_the_space_it_reclaims(tmp_path: Path) -> None:
    cfg = SimConfig(nodes=2, gpus_per_node=2, days=0.1)
    out = tmp_path / "out"
    first = simulate_to_dir(cfg, out)
    check = check_space(cfg, out, compress=False, replaced=[out / "metrics", out / "kernel"],
                        free=lambda _p: 0)
    assert check.reclaimed_bytes >= first.metric_bytes


@pytest.mark.parametrize(("flags", "fix"), [([], "--days"), (["--no-gzip"], "drop --no-gzip")])
def test_cli_refuses_with_sizes_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          flags: list[str], fix: str) -> None:
    monkeypatch.setattr(space, "free_bytes", lambda _p: 5_000_000)
    result = runner.invoke(app, ["simulate", *SMALL, "--days", "3", *flags,
                                 "--out", str(tmp_path / "sim")])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "--out needs ~" in line and "5.0 MB free on /" in line and fix in line
    assert not (tmp_path / "sim").exists()


def test_cli_gzips_by_default_and_no_gzip_writes_text(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", *SMALL, "--out", str(tmp_path / "gz")])
    assert result.exit_code == 0, result.output
    assert {p.suffix for p in (tmp_path / "gz" / "metrics").iterdir()} == {".gz"}
    result = runner.invoke(app, ["simulate", *SMALL, "--no-gzip", "--out", str(tmp_path / "om")])
    assert result.exit_code == 0, result.output
    assert {p.suffix for p in (tmp_path / "om" / "metrics").iterdir()} == {".om"}


def test_cli_creates_out_but_not_a_missing_parent(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", *SMALL, "--out", str(tmp_path / "a" / "b" / "sim")])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert f"--out {tmp_path / 'a' / 'b' / 'sim'} cannot be created" in line
    assert f"{tmp_path / 'a'} does not exist" in line
    assert list(tmp_path.iterdir()) == []


def test_cli_out_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    result = runner.invoke(app, ["simulate", *SMALL, "--out", str(tmp_path / "f")])
    assert result.exit_code == 2
    assert f"--out {tmp_path / 'f'} exists and is not a directory" in one_error_line(result)
