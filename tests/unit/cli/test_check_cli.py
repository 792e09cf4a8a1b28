"""`trainguard check` and `nodes release --verify` on the command line: the terminal report
(figures, floors, links, the all-reduce, the notes, the summary), host-name validation, the
probe time limit's flag and default, and Slurm outside an allocation."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from trainguard.check.allreduce import collective_finding
from trainguard.check.checker import Checker, CheckOptions, CheckReport
from trainguard.check.model import Figure, ProbeResult, Status
from trainguard.check.probe_base import PROBE_TIMEOUT_S
from trainguard.check.ringrun import RING_TIMEOUT_S, SUBSET_TIMEOUT_S, with_ring
from trainguard.cli import check as check_cli
from trainguard.cli import nodes as nodes_cli
from trainguard.cli.check import AgentsAt, allocation_problem
from trainguard.cli.main import app
from trainguard.cli.options import Duration
from trainguard.store import Store

runner = CliRunner()


class Agents:
    """Hosts whose cpu_gemm and links answer with fixed figures."""

    def __init__(self, gflops: Mapping[str, float]) -> None:
        self.gflops = dict(gflops)
        self.now = 100.0

    def clock(self) -> float:
        self.now += 0.001
        return self.now

    def request(self, nodes: Iterable[str], msg: Mapping[str, Any],
                timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        return self.request_each({n: msg for n in nodes}, timeout_s)

    def request_each(self, messages: Mapping[str, Mapping[str, Any]],
                     timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        out: dict[str, Mapping[str, Any]] = {}
        for host, msg in messages.items():
            if msg["t"] == "link_serve":
                out[host] = {"addr": "127.0.0.1", "port": 1}
            elif msg["t"] == "link_probe":
                out[host] = {"result": ProbeResult("link", host, Status.OK, (
                    Figure("link_mbps", 2100.0, "MB/s"),)).to_dict()}
            else:
                results = [] if msg.get("probes") == ["clock"] else [ProbeResult(
                    "cpu_gemm", host, Status.OK,
                    (Figure("gemm_gflops", self.gflops[host], "GFLOP/s"),)).to_dict()]
                out[host] = {"results": results, "t_host_recv": self.now, "t_host": self.now,
                             "machine": host}
        return out


class Recorder:
    """Stands in for run_host_check: checks fake agents and remembers what it was asked."""

    def __init__(self, gflops: Mapping[str, float] | None = None, ring: bool = True) -> None:
        self.gflops = gflops
        self.ring = ring
        self.calls: list[tuple[tuple[str, ...], CheckOptions, AgentsAt]] = []

    def __call__(self, hosts: tuple[str, ...], options: CheckOptions, at: AgentsAt,
                 db: str | None, context: str) -> CheckReport:
        self.calls.append((tuple(hosts), options, at))
        agents = Agents(self.gflops or {h: 50.0 for h in hosts})
        report = Checker(agents, clock=agents.clock).run(hosts, options)
        if not self.ring:
            return report
        ring = collective_finding({"backend": "gloo", "latency_ms": 0.52, "busbw_mbps": 1234.0},
                                  hosts)
        return with_ring(report, [ring], 1.0)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(check_cli, "run_host_check", rec)
    monkeypatch.setattr(nodes_cli, "run_host_check", rec)
    return rec


def one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_table_shows_figures_floors_links_and_the_all_reduce(recorder: Recorder,
                                                                 tmp_path: Path) -> None:
    floors = tmp_path / "floors.toml"
    floors.write_text("[floors]\ngemm_gflops = 20\n")
    r = runner.invoke(app, ["check", "--nodes", "n1,n2,n3", "--floors", str(floors)],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = flat(r.stdout)
    assert "gemm_gflops 50.0 GFLOP/s: pass (floor 20.0)" in text
    assert "links: 2,100 MB/s with n2" in text
    assert "allreduce pass: ring-wide all-reduce (gloo, 3 hosts): latency 0.52 ms, bus " \
           "bandwidth 1,234 MB/s" in text
    # the note that was only in the JSON (findings' reasons)
    assert "floors only: 3 host(s) measured gemm_gflops, fewer than 5" in text
    assert text.endswith("check: all 3 host(s) passed")


def test_every_host_failing_names_the_probe_and_floor(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setattr(check_cli, "run_host_check",
                        Recorder({"a": 812.0, "b": 700.0, "c": 650.0, "d": 90.0}, ring=False))
    floors = tmp_path / "floors.toml"
    floors.write_text("[floors]\ngemm_gflops = 1000\n")
    r = runner.invoke(app, ["check", "--nodes", "a,b,c,d", "--floors", str(floors)],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    assert "all 4 host(s) failed: cpu_gemm gemm_gflops at most 812 GFLOP/s < floor 1,000" \
        in flat(r.stdout)
    assert "not link-tested: it already failed cpu_gemm" in flat(r.stdout)


@pytest.mark.parametrize(("nodes", "why"), [
    ("a,,b", "empty entry"), ("a,b,", "empty entry"), ("a, ,b", "empty entry"),
    ("node 1", "not a valid host name"), ("a;reboot", "not a valid host name"),
    ("a,$(id)", "not a valid host name"), ("-a", "not a valid host name"),
    ("a-,b", "not a valid host name"), ("a..b", "not a valid host name"),
    ("node_1 x", "not a valid host name"), ("x" * 64, "not a valid host name"),
    ("n1,n2,n1", "names n1 twice"), ("N1,n1", "names n1 twice"), (" ", "no host names"),
])
def test_invalid_host_names_are_one_line_and_exit_2(recorder: Recorder, nodes: str,
                                                    why: str) -> None:
    r = runner.invoke(app, ["check", "--nodes", nodes])
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert "--nodes" in line and why in line
    assert recorder.calls == []


def test_valid_host_names_pass(recorder: Recorder) -> None:
    r = runner.invoke(app, ["check", "--nodes", "node-1.rack2 , 10.0.0.3,N7,gpu_node_4",
                            "--no-links", "--no-collective"])
    assert r.exit_code == 0, r.output
    # a Slurm node name with '_' is a name as any other
    assert recorder.calls[0][0] == ("node-1.rack2", "10.0.0.3", "N7", "gpu_node_4")


def test_the_probe_timeout_flag_its_old_name_and_one_default(recorder: Recorder) -> None:
    base = ["check", "--nodes", "a,b", "--no-links"]
    assert runner.invoke(app, base).exit_code == 0
    assert recorder.calls[-1][1].time_limit_s == PROBE_TIMEOUT_S
    assert runner.invoke(app, [*base, "--probe-timeout", "7"]).exit_code == 0
    assert recorder.calls[-1][1].time_limit_s == 7.0
    r = runner.invoke(app, [*base, "--time-limit", "9"])  # the old name still works
    assert r.exit_code == 0 and recorder.calls[-1][1].time_limit_s == 9.0
    assert "--time-limit is deprecated here: use --probe-timeout" in flat(r.stderr)
    r = runner.invoke(app, [*base, "--time-limit", "9", "--probe-timeout", "7"])
    assert r.exit_code == 2 and "give one" in one_error_line(r)
    assert len(recorder.calls) == 3
    shown = flat(runner.invoke(app, ["check", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "--probe-timeout" in shown and "--time-limit" not in shown


def test_the_ring_timeout_reaches_the_check_and_is_validated(recorder: Recorder) -> None:
    base = ["check", "--nodes", "a,b", "--no-links"]
    assert runner.invoke(app, base).exit_code == 0
    assert recorder.calls[-1][1].ring_timeout_s is None  # the ring's own defaults
    assert runner.invoke(app, [*base, "--ring-timeout", "2m"]).exit_code == 0
    assert recorder.calls[-1][1].ring_timeout_s == 120.0
    r = runner.invoke(app, [*base, "--ring-timeout", "0"])
    assert r.exit_code == 2 and "--ring-timeout" in one_error_line(r)
    assert len(recorder.calls) == 2
    shown = flat(runner.invoke(app, ["check", "--help"], env={"COLUMNS": "200"}).stdout)
    # the help says the ring's defaults in words (no import of ringrun at start-up)
    assert f"default: {RING_TIMEOUT_S:g}s for the ring" in shown
    assert f"{SUBSET_TIMEOUT_S:g}s a round" in shown


def _default(command: str, param: str, sub: str | None = None) -> object:
    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    if sub is not None:
        cmd = cmd.commands[sub]
    return next(p.default for p in cmd.params if p.name == param)


def test_every_probe_time_limit_defaults_to_one_constant(recorder: Recorder,
                                                         tmp_path: Path) -> None:
    # preflight, stop-time checks (help shows the default as a duration: read it back)
    assert Duration()(_default("run", "check_time_limit")) == PROBE_TIMEOUT_S
    assert CheckOptions().time_limit_s == PROBE_TIMEOUT_S
    db = str(tmp_path / "tg.db")
    assert runner.invoke(app, ["nodes", "exclude", "n1", "--reason", "r", "--db", db]) \
        .exit_code == 0
    r = runner.invoke(app, ["nodes", "release", "n1", "--verify", "--db", db])
    assert r.exit_code == 0, r.output
    assert recorder.calls[-1][1].time_limit_s == PROBE_TIMEOUT_S
    assert runner.invoke(app, ["nodes", "exclude", "n1", "--reason", "r", "--db", db]) \
        .exit_code == 0
    r = runner.invoke(app, ["nodes", "release", "n1", "--verify", "--db", db,
                            "--probe-timeout", "4"])
    assert r.exit_code == 0 and recorder.calls[-1][1].time_limit_s == 4.0


def test_slurm_outside_an_allocation_fails_at_once(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "called"
    for tool in ("sbatch", "srun", "scontrol", "squeue"):
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\necho {tool} >> {called}\nexit 1\n")
        script.chmod(0o755)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r = runner.invoke(app, ["check", "--backend", "slurm", "--nodes", "a,b",
                            "--connect-timeout", "1"])
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert "run inside an allocation (salloc" in line and "does not submit" in line
    assert not called.exists()  # neither sbatch nor srun was tried


def test_allocation_problem() -> None:
    assert allocation_problem("slurm", {}) is not None
    assert allocation_problem("slurm", {"SLURM_JOB_ID": "42"}) is None
    assert allocation_problem("local", {}) is None


def test_release_verify_of_a_node_never_excluded_runs_nothing(recorder: Recorder,
                                                              tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        store.upsert_node("n2", state="ok", seen=1.0)
    r = runner.invoke(app, ["nodes", "release", "n9", "--verify", "--db", db])
    assert r.exit_code == 2, r.output
    assert "n9 is not a node the store knows" in one_error_line(r)
    r = runner.invoke(app, ["nodes", "release", "n2", "--verify", "--db", db,
                            "--peers", "n3,n4"])
    assert r.exit_code == 2, r.output
    assert "n2 has no active exclusion" in one_error_line(r)
    assert recorder.calls == []


def test_release_verify_validates_its_hosts_before_anything(recorder: Recorder,
                                                            tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    assert runner.invoke(app, ["nodes", "exclude", "n1", "--reason", "r", "--db", db]) \
        .exit_code == 0
    r = runner.invoke(app, ["nodes", "release", "n1", "--verify", "--db", db,
                            "--peers", "n2,,n3"])
    assert r.exit_code == 2 and "empty entry" in one_error_line(r)
    r = runner.invoke(app, ["nodes", "release", "n1", "--verify", "--db", db,
                            "--peers", "n2;x"])
    assert r.exit_code == 2 and "not a valid host name" in one_error_line(r)
    assert recorder.calls == []
    with Store.open(db) as store:
        assert store.active_excluded_nodes() == {"n1"}


def test_json_carries_the_same_notes_and_summary(recorder: Recorder) -> None:
    r = runner.invoke(app, ["check", "--nodes", "n1,n2,n3", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["summary"] == "all 3 host(s) passed"
    assert [n.split(":")[0] for n in doc["notes"]] == ["floors only"]
    assert doc["floors"] == {}
