"""`LiveExporter` on a fake clock: served samples equal the offline simulation's, an injected
precursor shows up at its simulated time, /truth maps the schedule to wall time."""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import typer
from sim_helpers import SMALL
from typer.testing import CliRunner

from trainguard.cli.simulate import simulate
from trainguard.errors import ConfigError
from trainguard.simulate import SimConfig, build_scenario, generate
from trainguard.simulate.faults import Failure
from trainguard.simulate.scenario import Scenario
from trainguard.simulate.serve import (
    CONTENT_TYPE,
    ExporterServer,
    LiveExporter,
    SimClock,
    parse_listen,
)
from trainguard.telemetry.builder import TelemetryBuilder
from trainguard.telemetry.openmetrics import read_openmetrics

WALL0 = 1_900_000_000.0
_LINE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")

# Nothing random goes wrong: the only failure is the one a test injects.
QUIET = SimConfig(nodes=4, gpus_per_node=2, days=0.25, seed=5, interval_s=30,
                  failures_per_day=0, app_xids_per_day=0, maintenances_per_day=0,
                  benign_per_day=0, scrape_gaps_per_day=0, missing_sample_prob=0)
PRE_S = QUIET.start_s + 3600
XID_S = PRE_S + 1800


class FakeClock:
    def __init__(self, now: float = WALL0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Exposition text -> {(name, labels): value}; checks HELP/TYPE precede each family."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif not line.startswith("# HELP "):
            m = _LINE.match(line)
            assert m, f"bad sample line {line!r}"
            assert m["name"] in typed, f"{m['name']} has no # TYPE line"
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
            out[(m["name"], labels)] = float(m["value"])
    return out


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float | None:
    hits = [v for (n, ls), v in samples.items()
            if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1
    return hits[0] if hits else None


def injected(cfg: SimConfig = QUIET) -> Scenario:
    sc = build_scenario(cfg)
    f = Failure(node=1, gpus=(1,), node_level=False, time_s=XID_S, xid=48,
                precursor="ecc_sbe", precursor_start_s=PRE_S, magnitude=3.0, drain_s=1200,
                repair_s=3600, vanishes=False, message="An uncorrectable double bit error")
    return dataclasses.replace(sc, failures=(f,))


def test_served_samples_equal_the_offline_simulation() -> None:
    clock = FakeClock()
    exporter = LiveExporter.from_config(SMALL, speed=120, clock=clock)
    chunks = list(generate(SMALL))
    gpu = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
           "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_XID_ERRORS"}
    node = {"node_cpu_seconds", "node_load1", "node_network_receive_bytes"}
    checked = absent = 0
    for chunk in (chunks[0], chunks[1], chunks[-1]):
        for k in (0, 7, chunk.times.size - 1):
            t = int(chunk.times[k])
            # between two samples: the latest one at or before t is served
            clock.now = exporter.clock.to_wall(t + SMALL.interval_s / 2)
            samples = parse(exporter.exposition())
            for block in chunk.metrics:
                if block.spec.name not in gpu | node:
                    continue
                for row in range(0, len(block.labels), 5):
                    got = value(samples, block.spec.sample_name, **dict(block.labels[row]))
                    want = block.values[row, k]
                    if np.isnan(want):
                        assert got is None
                        absent += 1
                    else:
                        assert got == pytest.approx(want, abs=10 ** -block.spec.decimals)
                        checked += 1
    assert checked > 200


def test_dcgm_labels_and_node_exporter_names() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    text = exporter.exposition(QUIET.start_s + 600)
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert "# TYPE node_cpu_seconds_total counter" in text  # text format: the sample's name
    samples = parse(text)
    uuid = exporter.scenario.fleet.uuids[1][1]
    assert value(samples, "DCGM_FI_DEV_GPU_TEMP", Hostname="node02", gpu="1", UUID=uuid,
                 device="nvidia1") is not None
    assert value(samples, "node_cpu_seconds_total", instance="node03:9100", job="node",
                 mode="idle") is not None
    assert len({ls for n, ls in samples if n == "DCGM_FI_DEV_GPU_UTIL"}) == 8


def test_injected_precursor_appears_at_its_simulated_time() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    iv = QUIET.interval_s

    def sbe(t: float) -> float | None:
        return value(parse(exporter.exposition(t)), "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                     Hostname="node02", gpu="1")

    def xid(t: float) -> float | None:
        return value(parse(exporter.exposition(t)), "DCGM_FI_DEV_XID_ERRORS",
                     Hostname="node02", gpu="1")

    quiet = sbe(QUIET.start_s)
    assert sbe(PRE_S - 1) == quiet  # nothing before the precursor
    assert (sbe(XID_S - iv) or 0) > (quiet or 0) + 10  # rising ECC errors before the XID
    assert xid(XID_S - 1) == 0 and xid(XID_S) == 48 and xid(XID_S + iv) == 48
    assert value(parse(exporter.exposition(XID_S)), "DCGM_FI_DEV_XID_ERRORS",
                 Hostname="node02", gpu="0") == 0  # the healthy neighbour


def test_clock_drives_the_served_time() -> None:
    clock = FakeClock()
    exporter = LiveExporter(injected(), speed=60, clock=clock,
                            start_at_s=PRE_S - 600)  # ten simulated minutes before
    assert exporter.clock.now() == PRE_S - 600
    clock.now = WALL0 + 10.0  # 10 wall seconds = 600 simulated seconds
    assert exporter.clock.now() == PRE_S
    assert exporter.exposition() == exporter.exposition(PRE_S)
    clock.now = WALL0 + 1800 / 60 + 10
    assert value(parse(exporter.exposition()), "DCGM_FI_DEV_XID_ERRORS",
                 Hostname="node02", gpu="1") == 48


def test_truth_maps_the_schedule_to_wall_time() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock(), start_at_s=PRE_S - 600)
    truth = json.loads(json.dumps(exporter.truth()))
    assert truth["clock"]["speed"] == 60 and truth["clock"]["wall_start"] == WALL0
    assert truth["clock"]["interval_wall_s"] == 0.5
    (f,) = truth["failures"]
    assert (f["node"], f["gpu"], f["xid"], f["precursor"]) == ("node02", "1", 48, "ecc_sbe")
    assert f["precursor_start_wall"] == WALL0 + 10.0
    assert f["time_wall"] == WALL0 + 10.0 + 1800 / 60
    assert all("start_wall" in e for e in truth["events"] if e["type"] == "job")
    assert truth["nodes"] == ["node01", "node02", "node03", "node04"]


def test_outside_the_span_nothing_is_served() -> None:
    clock = FakeClock()
    exporter = LiveExporter(injected(), speed=3600, clock=clock)
    assert exporter.health()["status"] == "running"
    clock.now = exporter.clock.to_wall(QUIET.end_s)
    assert exporter.exposition() == ""
    assert exporter.health()["status"] == "finished"


def test_going_back_regenerates_the_same_samples() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    early = exporter.exposition(QUIET.start_s + 300)
    exporter.exposition(QUIET.end_s - 1)  # last window: earlier ones are dropped
    assert exporter.exposition(QUIET.start_s + 300) == early


def test_timestamped_exposition_parses_with_the_project_reader(tmp_path: Path) -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    t = PRE_S + 45  # the sample at PRE_S + 30 is served
    path = tmp_path / "scrape.prom"
    path.write_text(exporter.exposition(t, timestamps=True))
    builder = TelemetryBuilder()
    stats = read_openmetrics([path], builder, timestamp_unit="ms")
    assert stats.malformed == 0, stats.examples
    assert stats.samples == len(parse(exporter.exposition(t)))
    assert builder.t_range == (exporter.clock.to_wall(PRE_S + 30),) * 2


def test_exposition_parses_with_prometheus_client() -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    families = {f.name: f for f in
                parser.text_string_to_metric_families(exporter.exposition(XID_S))}
    assert families["DCGM_FI_DEV_XID_ERRORS"].type == "gauge"
    assert families["node_cpu_seconds"].type == "counter"
    assert len(families["node_cpu_seconds"].samples) == 4 * 4


def test_http_endpoints() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    with exporter.serve("127.0.0.1", 0) as server:
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            assert resp.read().decode() == exporter.exposition()
        with urllib.request.urlopen(f"{server.url}/truth", timeout=5) as resp:
            assert json.loads(resp.read())["failures"][0]["xid"] == 48
        with urllib.request.urlopen(f"{server.url}/healthz", timeout=5) as resp:
            assert json.loads(resp.read())["status"] == "running"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{server.url}/nope", timeout=5)


def test_port_in_use_is_a_config_error() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    with exporter.serve() as server, pytest.raises(ConfigError, match="cannot listen"):
        ExporterServer(exporter, "127.0.0.1", server.port)


@pytest.mark.parametrize(("text", "want"), [
    ("9400", ("127.0.0.1", 9400)),
    ("0.0.0.0:9400", ("0.0.0.0", 9400)),
    ("[::1]:0", ("::1", 0)),
])
def test_parse_listen(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["", "abc", "host:", ":9400", "1:70000", "9400x"])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match=r"simulate\.serve"):
        parse_listen(text)


@pytest.mark.parametrize("speed", [0, -1, float("inf"), float("nan")])
def test_bad_speed(speed: float) -> None:
    with pytest.raises(ConfigError, match=r"simulate\.speed"):
        SimClock(speed, 0, 0)


def test_start_outside_the_span() -> None:
    with pytest.raises(ConfigError, match=r"simulate\.start_at"):
        LiveExporter(injected(), start_at_s=QUIET.end_s)


# -- CLI -------------------------------------------------------------------------------------

runner = CliRunner()
app = typer.Typer()
app.command("simulate")(simulate)
app.command("noop")(lambda: None)  # a second command keeps "simulate" as a sub-command


def test_cli_help_lists_serve_options() -> None:
    result = runner.invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0
    assert "--serve" in result.output and "--speed" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--serve", "0", "--speed", "0"], "--speed must be"),
    (["--serve", "0", "--speed", "-3"], "--speed must be"),
    (["--serve", "notaport"], "--serve 'notaport' is not [HOST:]PORT"),
    (["--speed", "10", "--out", "x"], "--speed needs --serve"),
    (["--serve", "0", "--out", "x"], "exclude each other"),
    ([], "--out DIR"),
])
def test_cli_bad_serve_options(args: list[str], message: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["simulate", "--nodes", "2", *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_cli_port_in_use() -> None:
    exporter = LiveExporter(injected(), speed=60, clock=FakeClock())
    with exporter.serve() as server:
        result = runner.invoke(app, ["simulate", "--nodes", "2", "--serve",
                                     f"127.0.0.1:{server.port}"])
    assert result.exit_code == 2
    assert f"--serve 127.0.0.1:{server.port}: cannot listen there" in result.output
    assert "Traceback" not in result.output
