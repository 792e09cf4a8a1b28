"""`trainguard detect` and `backtest` on a tiny simulated cluster: outputs and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from trainguard.cli.main import app
from trainguard.simulate import SimConfig, build_scenario, simulate_to_dir

# Seed 4 at 4 failures/day: an XID 79 on node04 (6.2 h) and an XID 74 on node01 (8.5 h).
TINY = SimConfig(nodes=6, gpus_per_node=2, days=0.5, seed=4, interval_s=60, failures_per_day=4)
ALERT_KEYS = {"node", "start", "end", "peak_score", "kind", "signals"}

runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture(scope="session")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulator's output directory: metrics/, kernel/, labels.jsonl, manifest.json."""
    out = tmp_path_factory.mktemp("detect-cli") / "sim"
    simulate_to_dir(TINY, out)
    return out


def _failed_nodes() -> set[str]:
    return {TINY.node_names[f.node] for f in build_scenario(TINY).failures}


def test_tiny_scenario_has_two_hardware_failures() -> None:
    assert _failed_nodes() == {"node01", "node04"}


# --- detect ------------------------------------------------------------------------------------


def test_detect_json_prints_one_alert_per_line(sim_dir: Path) -> None:
    result = invoke("detect", str(sim_dir), "--json")

    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows
    for row in rows:
        assert set(row) >= ALERT_KEYS
        assert row["kind"] in ("predictive", "hard")
        assert row["start"] <= row["end"]
        assert isinstance(row["signals"], list)
        assert row["signals"]
        assert set(row["signals"][0]) >= {"metric", "gpu", "deviation"}
    assert {r["node"] for r in rows if r["kind"] == "hard"} >= _failed_nodes()
    assert [r["start"] for r in rows] == sorted(r["start"] for r in rows)


def test_detect_out_writes_jsonl_and_prints_the_table(sim_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "alerts.jsonl"

    result = invoke("detect", str(sim_dir), "--out", str(out))

    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows
    assert all(set(r) >= ALERT_KEYS for r in rows)
    text = " ".join(result.stdout.split())
    assert "6 nodes," in text
    assert "0.5 days at 60s" in text
    assert f"{len(rows)} alert episodes" in text
    assert f"wrote {len(rows)} episodes to" in text
    for heading in ("node", "start (UTC)", "kind", "peak", "top signals"):
        assert heading in text
    assert "hard" in text


def test_detect_json_and_out_agree(sim_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "alerts.jsonl"
    result = invoke("detect", str(sim_dir / "metrics"), "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text() == result.stdout


def test_detect_malformed_lines_warn_with_file_and_line(tmp_path: Path) -> None:
    good = [f'DCGM_FI_DEV_GPU_TEMP{{Hostname="node0{n}",gpu="{g}"}} {40 + g + i % 3} '
            f"{TINY.start_s + 60 * i}" for n in (1, 2) for g in (0, 1) for i in range(30)]
    bad = [
        'DCGM_FI_DEV_GPU_TEMP{Hostname="node01",gpu="0" 42 1731888060',  # unclosed labels
        'DCGM_FI_DEV_GPU_TEMP{Hostname="node01",gpu="0"} forty-two 1731888120',
        "DCGM_FI_DEV_GPU_TEMP{} 1 2 3 4",
    ]
    path = tmp_path / "bad.om"
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", bad[0], *good[:60], bad[1], *good[60:],
             bad[2], "# EOF"]
    path.write_text("\n".join(lines) + "\n")
    bad_lines = [i for i, line in enumerate(lines, start=1) if line in bad]

    result = invoke("detect", str(path))

    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    err = " ".join(result.stderr.split())
    assert "warning: 3 malformed OpenMetrics lines skipped" in err
    for n in bad_lines:
        assert f"{path}:{n}:" in err
    assert "2 nodes, 1 metrics, 120 samples" in " ".join(result.stdout.split())


@pytest.mark.parametrize("kind", ["empty-dir", "dir-without-metrics", "missing"])
def test_detect_without_telemetry_is_one_error_line(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "telemetry"
    if kind != "missing":
        target.mkdir()
    if kind == "dir-without-metrics":
        (target / "README.md").write_text("nothing here\n")
        (target / "labels.jsonl").write_text("")

    result = invoke("detect", str(target))

    assert result.exit_code == 2
    line = _one_error_line(result)
    assert str(target) in line
    expected = "telemetry source not found" if kind == "missing" else "no metrics files"
    assert expected in line


@pytest.mark.parametrize("command", ["detect", "backtest"])
def test_no_arguments_is_a_usage_error(command: str) -> None:
    result = invoke(command)
    assert result.exit_code == 2
    assert "Usage:" in result.output
    assert f"trainguard {command}" in result.output
    assert "Traceback" not in result.output


# --- backtest ----------------------------------------------------------------------------------


def test_backtest_static_json_scorecards(sim_dir: Path) -> None:
    result = invoke("backtest", str(sim_dir), "--baseline", "static", "--json")

    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["truth"].endswith("labels.jsonl (found next to the telemetry)")
    assert doc["n_failures"] == 2
    cards = {c["name"]: c for c in doc["cards"]}
    assert list(cards) == ["trainguard", "static rules"]
    for card in cards.values():
        assert set(card) >= {"span", "days", "n_nodes", "n_alerts", "total", "by_type",
                             "false_positives", "fp_per_day", "missed"}
        assert card["n_nodes"] == 6
        assert card["total"]["n"] == 2
        assert sorted(t["failure_type"] for t in card["by_type"]) == ["xid74", "xid79"]
    # Both failures raise an XID: trainguard's hard alerts catch each of them.
    assert cards["trainguard"]["total"]["detected"] == 2
    assert cards["trainguard"]["missed"] == []


def test_backtest_missing_failures_file_is_one_error_line(sim_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    result = invoke("backtest", str(sim_dir / "metrics"), "--failures", str(missing),
                    "--baseline", "none")
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "--failures" in line
    assert str(missing) in " ".join(result.stderr.split())
    assert result.stdout == ""
