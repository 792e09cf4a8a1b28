"""Issue 26, section 4: `run --preflight` on 3 identical hosts never excludes one for a figure
a peer comparison cannot judge (2 other hosts), and still excludes a host that fails a floor."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from trainguard.check.checker import Checker, CheckOptions, CheckReport
from trainguard.check.floors import Floors
from trainguard.check.model import Figure, ProbeResult, Status
from trainguard.recover.chain import Chain
from trainguard.recover.hostchecks import HostCheckConfig, HostChecks, TooFewGoodHosts


class Hosts:
    """Agents whose cpu_gemm figures are fixed per host; one shared clock."""

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
            results = [] if msg.get("probes") == ["clock"] else [ProbeResult(
                "cpu_gemm", host, Status.OK,
                (Figure("gemm_gflops", self.gflops[host], "GFLOP/s", True, 0.03),)).to_dict()]
            out[host] = {"results": results, "t_host_recv": self.now, "t_host": self.now,
                         "machine": host}
        return out


class Backend:
    def __init__(self, hosts: Hosts) -> None:
        self.hosts = hosts
        self.excluded: list[str] = []

    def check_hosts(self, hosts: Sequence[str], options: CheckOptions, work_dir: Path,
                    status: Callable[[str], None]) -> CheckReport:
        return Checker(self.hosts, clock=self.hosts.clock).run(hosts, options)

    def exclude(self, node: str, reason: str) -> None:
        self.excluded.append(node)


class Sched:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def exclude(self, node: str, reason: str) -> None:
        self.backend.exclude(node, reason)


def _preflight(gflops: dict[str, float], floors: Floors | None = None,
               tmp: Path = Path("/nonexistent")) -> tuple[Chain, list[str]]:
    backend = Backend(Hosts(gflops))
    options = CheckOptions(probes=("cpu_gemm",), links=False, collective=False,
                           floors=floors or Floors())
    chain = Chain(nodes=("a", "b"), spares=["c"])
    checks = HostChecks(HostCheckConfig(preflight=True, options=options), backend, tmp,
                        Sched(backend), lambda _: None, required=2)  # type: ignore[arg-type]
    checks.preflight(chain)
    return chain, backend.excluded


def test_three_identical_hosts_keep_a_host_at_0_58x() -> None:
    chain, excluded = _preflight({"a": 50.0, "b": 29.0, "c": 50.4})
    assert excluded == [] and chain.nodes == ("a", "b") and chain.exclusions == []


def test_a_floor_still_excludes_on_three_hosts() -> None:
    chain, excluded = _preflight({"a": 50.0, "b": 5.0, "c": 50.4},
                                 Floors.from_mapping({"gemm_gflops": 20}))
    assert excluded == ["b"] and chain.nodes == ("a", "c")


def test_when_every_host_fails_the_preflight_names_the_probe_and_floor() -> None:
    with pytest.raises(TooFewGoodHosts) as caught:
        _preflight({"a": 8.0, "b": 5.0, "c": 6.5}, Floors.from_mapping({"gemm_gflops": 20}))
    message = str(caught.value)
    assert "a, b, c failed" in message
    assert message.endswith("all 3 host(s) failed: cpu_gemm gemm_gflops at most 8.00 GFLOP/s "
                            "< floor 20.0"), message
