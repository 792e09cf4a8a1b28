"""Detection reads the same from OpenMetrics files as from a real Prometheus holding them.

A simulated cluster is written to disk, every 2-h window file is backfilled into a throwaway
Prometheus, and the detector runs on both inputs: the alert episodes must be identical.

Why the server runs with ``--query.lookback-delta`` below the scrape interval: backfilled blocks
carry no staleness markers, so with the default 5-min lookback ``query_range`` repeats a series'
last value for up to 5 min into every gap (a scrape gap, a missing sample, a GPU that fell off the
bus). A live-scraped Prometheus writes staleness markers at those points and shows the gap; the
backfill would not. trainguard itself reads each metric with ``last_over_time(x[step - 1ms])``,
which sees exactly the files' samples under any lookback:
``test_default_lookback_does_not_fill_gaps_of_backfilled_series`` pins both.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from prometheus_server import (
    PrometheusStartError,
    PrometheusUnavailable,
    PromServer,
    StartPrometheus,
    _unavailable,
    binaries,
    prometheus_factory_fixture,  # noqa: F401 - registers the prometheus_factory fixture
    start_prometheus,
)
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.detect import AlertEpisode, AlertKind, detect
from trainguard.simulate import SimConfig, SimSummary, build_scenario, simulate_to_dir
from trainguard.telemetry import (
    MetricKind,
    PrometheusClient,
    Telemetry,
    TelemetryBuilder,
    load_sources,
    read_prometheus,
)

pytestmark = pytest.mark.integration

# Seed 4: an XID 79 on node05 at 11.8 h (the GPU falls off the bus: its series vanish) and an
# XID 74 on node01 at 17.1 h, plus scrape gaps and missing samples.
CFG = SimConfig(nodes=8, gpus_per_node=4, days=1.0, seed=4)
STEP = CFG.interval_s
START = CFG.start_s  # a multiple of the step
END = CFG.end_s - STEP  # the last sample's time: nothing past the simulated span
NO_GAP_FILL = f"--query.lookback-delta={STEP // 2}s"  # sees a sample only at its own instant

runner = CliRunner()


@dataclass(frozen=True)
class Backfilled:
    files: tuple[Path, ...]
    summary: SimSummary
    server: PromServer


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    """The simulation on disk and in a running Prometheus (module-scoped: backfill is ~10 s)."""
    try:
        binaries()
    except PrometheusUnavailable as exc:
        _unavailable(str(exc))
    sim = tmp_path_factory.mktemp("sim")
    prom_dir = tmp_path_factory.mktemp("prometheus")
    try:
        summary = simulate_to_dir(CFG, sim)
        files = tuple(sorted((sim / "metrics").glob("metrics-*.om")))
        assert len(files) == CFG.n_windows
        try:
            server = start_prometheus(prom_dir, files, extra_args=[NO_GAP_FILL])
        except PrometheusStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        try:
            yield Backfilled(files, summary, server)
        finally:
            server.stop()
    finally:  # about 0.5 GB of text: do not leave it in pytest's kept temp dirs
        shutil.rmtree(sim, ignore_errors=True)
        shutil.rmtree(prom_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def from_files(backfilled: Backfilled) -> tuple[Telemetry, list[AlertEpisode]]:
    """The reference: telemetry and alerts read straight from the OpenMetrics files."""
    tel, warnings = load_sources(list(backfilled.files))
    assert warnings == []
    return tel, detect(tel)


def _from_prometheus(url: str) -> tuple[Telemetry, int]:
    builder = TelemetryBuilder(step_s=STEP)
    stats = read_prometheus(PrometheusClient(url), builder, start=START, end=END, step_s=STEP)
    return builder.build(), stats.samples


def _dicts(alerts: list[AlertEpisode]) -> list[dict[str, object]]:
    return [a.to_dict() for a in alerts]


def test_alerts_from_prometheus_equal_alerts_from_files(
        backfilled: Backfilled, from_files: tuple[Telemetry, list[AlertEpisode]]) -> None:
    tel_files, alerts_files = from_files
    tel_prom, prom_samples = _from_prometheus(backfilled.server.url)

    # The data itself first: the same grid, series and samples (NaN where nothing was reported).
    assert prom_samples == backfilled.summary.samples == tel_files.n_samples
    assert tel_prom.step_s == tel_files.step_s == STEP
    np.testing.assert_array_equal(tel_prom.times, tel_files.times)
    assert [m.name for m in tel_prom.metrics] == [m.name for m in tel_files.metrics]
    for p, f in zip(tel_prom.metrics, tel_files.metrics, strict=True):
        assert p.entities == f.entities, p.name
        np.testing.assert_array_equal(p.values, f.values, err_msg=p.name)
        # Backfilled blocks have no metadata (/api/v1/metadata only knows scraped targets): a
        # `# TYPE` line is lost and only the `_total` naming rule is left. The detector infers
        # monotonic series itself, so the alerts below must not depend on it.
        assert p.kind in (f.kind, MetricKind.UNKNOWN), p.name

    alerts_prom = detect(tel_prom)
    assert _dicts(alerts_prom) == _dicts(alerts_files)
    assert alerts_prom == alerts_files

    # Each hardware failure has its hard alert on the failed node within 5 min of the XID.
    scenario = build_scenario(CFG)
    assert len(scenario.failures) == 2
    for failure in scenario.failures:
        node = CFG.node_names[failure.node]
        assert any(a.kind is AlertKind.HARD and a.node == node
                   and failure.time_s <= a.start <= failure.time_s + 300
                   for a in alerts_prom), (node, failure.xid)


def test_cli_detect_from_prometheus_prints_the_same_alerts(
        backfilled: Backfilled, from_files: tuple[Telemetry, list[AlertEpisode]]) -> None:
    expected = _dicts(from_files[1])
    start_iso = datetime.fromtimestamp(START, UTC).isoformat().replace("+00:00", "Z")
    result = runner.invoke(app, ["detect", "--prometheus", backfilled.server.url,
                                 "--start", start_iso, "--end", str(END),
                                 "--step", str(STEP), "--json"])
    assert result.exit_code == 0, result.output
    got = [json.loads(line) for line in result.stdout.splitlines()]
    assert got == expected
    assert any(a["kind"] == "hard" for a in got)


def test_cli_detect_unreachable_prometheus_is_one_error_line() -> None:
    # Port 9 (discard) refuses connections; the client retries 4 times with backoff (~7.5 s).
    result = runner.invoke(app, ["detect", "--prometheus", "http://127.0.0.1:9",
                                 "--start", str(START), "--end", str(START + 3600)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot reach Prometheus at http://127.0.0.1:9")
    assert result.stdout == ""


def test_default_lookback_does_not_fill_gaps_of_backfilled_series(
        tmp_path: Path, prometheus_factory: StartPrometheus) -> None:
    """With Prometheus' default 5-min lookback a backfilled series (no staleness markers) reads
    as present 5 min into a gap and 5 min past its last sample when queried plainly. trainguard
    reads each metric with last_over_time(x[step - 1ms]): exactly the samples the files hold."""
    t0 = CFG.first_window_s
    present = [i for i in range(40) if not 10 <= i < 24]  # a 7-min gap; the series ends at 39
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    lines += [f'DCGM_FI_DEV_GPU_TEMP{{Hostname="node01",gpu="0"}} {40 + i} {t0 + i * STEP}'
              for i in present]
    path = tmp_path / "gap.om"
    path.write_text("\n".join([*lines, "# EOF"]) + "\n")
    server = prometheus_factory([path])
    client = PrometheusClient(server.url)

    # the artifact, in a plain query: the last value carried 10 grid points into the gap
    ((_labels, ts, _vals),) = client.query_range("DCGM_FI_DEV_GPU_TEMP", t0, t0 + 49 * STEP,
                                                  STEP)
    lookback = 300 // STEP
    steps = ((ts - t0) / STEP).astype(int).tolist()
    assert steps == [*range(0, 10 + lookback), *range(24, 40 + lookback)]

    builder = TelemetryBuilder(step_s=STEP)
    read_prometheus(client, builder, start=t0, end=t0 + 49 * STEP, step_s=STEP)
    row = builder.build().metrics[0].values[0]
    assert np.flatnonzero(~np.isnan(row)).tolist() == present
    assert row[present].tolist() == [40.0 + i for i in present]
