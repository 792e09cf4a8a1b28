"""Issue 26, section 4 (clock): several samples, not one request/reply. Hosts on the
controller's clock read about 0 ms whatever the first reply cost, a 50 ms limit is enforced,
and a NaN, infinite or missing reading never passes."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from trainguard.agent.checks import run_check
from trainguard.check.checker import Checker, CheckOptions
from trainguard.check.clocksync import (
    HOLDS_S,
    SAMPLES,
    ClockSample,
    estimate,
    offset_finding,
)
from trainguard.check.model import Figure, Level, ProbeResult, Status

POLL_S = 0.02
"""The controller's reply polling (RemoteAttempt): a reply is seen at the next poll."""


class PolledHosts:
    """Agents behind a controller that polls for replies every 20 ms. Each host's clock is the
    controller's plus its skew; its first reply costs ``first_s`` (importing the probes), later
    ones ``work_s``; one-way delays are ``wire_s``. ``t_host`` may be forced (NaN...)."""

    def __init__(self, hosts: list[str], *, skew: Mapping[str, float] | None = None,
                 first_s: float = 0.3, work_s: float = 0.002, wire_s: float = 0.0005,
                 t_host: Mapping[str, Any] | None = None) -> None:
        self.hosts = hosts
        self.skew = dict(skew or {})
        self.first_s, self.work_s, self.wire_s = first_s, work_s, wire_s
        self.forced = dict(t_host or {})
        self.now = 5000.0
        self.seen: set[str] = set()
        self.clock_requests = 0

    def clock(self) -> float:
        return self.now

    def request(self, nodes: Iterable[str], msg: Mapping[str, Any],
                timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        return self.request_each({n: msg for n in nodes}, timeout_s)

    def request_each(self, messages: Mapping[str, Mapping[str, Any]],
                     timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        sent = self.now
        out: dict[str, Mapping[str, Any]] = {}
        last = sent
        for host, msg in messages.items():
            arrive = sent + self.wire_s
            work = self.work_s if host in self.seen else self.first_s
            self.seen.add(host)
            hold = float(msg.get("hold_s") or 0.0)
            skew = self.skew.get(host, 0.0)
            reply_at = arrive + work + hold
            last = max(last, reply_at + self.wire_s)
            results = [] if msg.get("probes") == ["clock"] else [ProbeResult(
                "cpu_gemm", host, Status.OK, (Figure("gemm_gflops", 50.0, "GFLOP/s"),)
            ).to_dict()]
            out[host] = {"results": results, "t_host_recv": arrive + skew,
                         "t_host": self.forced.get(host, reply_at + skew), "machine": host}
        if any(m.get("probes") == ["clock"] for m in messages.values()):
            self.clock_requests += 1
        self.now = sent + math.ceil((last - sent) / POLL_S) * POLL_S  # seen at the next poll
        return out


HOSTS = [f"n{i}" for i in range(1, 6)]


def _clock_findings(agents: PolledHosts, limit_s: float = 0.05) -> dict[str, Any]:
    opts = CheckOptions(probes=("cpu_gemm",), links=False, collective=False,
                        max_clock_offset_s=limit_s)
    report = Checker(agents, clock=agents.clock).run(agents.hosts, opts)
    return {f.subject: f for f in report.findings if f.check == "clock"}


def test_hosts_on_one_clock_read_about_zero_and_pass_a_50_ms_limit() -> None:
    agents = PolledHosts(HOSTS)
    found = _clock_findings(agents)
    assert agents.clock_requests == SAMPLES
    for f in found.values():
        assert f.level is Level.PASS, f.reason
        assert f.value is not None and abs(f.value) < 2.0, f.reason  # ms
    # one request/reply of 300 ms read "+150 ms +-150 ms" before; now a few ms
    assert all("+-" in f.reason and float(f.reason.split("+-")[1].split()[0]) < 3.0
               for f in found.values())


def test_a_host_80_ms_off_fails_a_50_ms_limit_and_the_others_pass() -> None:
    found = _clock_findings(PolledHosts(HOSTS, skew={"n3": 0.080}))
    assert found["n3"].level is Level.FAIL, found["n3"].reason
    assert found["n3"].value == pytest.approx(80.0, abs=2.0)
    assert {h for h, f in found.items() if f.level is not Level.PASS} == {"n3"}
    found = _clock_findings(PolledHosts(HOSTS, skew={"n3": -0.080}))
    assert found["n3"].level is Level.FAIL


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "soon", None, True])
def test_a_reading_that_is_not_a_finite_number_never_passes(bad: Any) -> None:
    found = _clock_findings(PolledHosts(HOSTS, t_host={"n2": bad}))
    assert found["n2"].level is Level.FAIL, found["n2"].reason
    assert "not measured" in found["n2"].reason
    assert all(f.level is Level.PASS for h, f in found.items() if h != "n2")


def test_offset_finding_levels() -> None:
    assert offset_finding("h", 0.0, 0.001, 0.05).level is Level.PASS
    assert offset_finding("h", 0.06, 0.005, 0.05).level is Level.FAIL
    assert offset_finding("h", 0.06, 0.02, 0.05).level is Level.PASS  # within its uncertainty
    unknown = offset_finding("h", 0.01, 0.2, 0.05)
    assert unknown.level is Level.SKIPPED and "unknown" in unknown.reason
    assert offset_finding("h", 5.0, 0.2, 0.05).level is Level.FAIL  # off whatever the error
    for bad in (float("nan"), float("inf"), -float("inf")):
        assert offset_finding("h", bad, 0.001, 0.05).level is Level.FAIL
        assert offset_finding("h", 0.0, bad, 0.05).level is Level.FAIL


def test_slow_replies_everywhere_are_unknown_not_pass() -> None:
    found = _clock_findings(PolledHosts(HOSTS, wire_s=0.2))  # a slow network both ways
    assert {f.level for f in found.values()} == {Level.SKIPPED}


def test_estimate_intersects_the_samples_and_falls_back_to_the_shortest_round_trip() -> None:
    samples = [ClockSample(0.0, 0.02, 0.0005, 0.0015 + h) for h in HOLDS_S]
    est = estimate(samples)
    assert est is not None and abs(est.offset_s) < 0.003 and est.uncertainty_s < 0.003
    stepped = [ClockSample(0.0, 0.01, 1.0, 1.001), ClockSample(1.0, 1.004, 0.0, 0.001)]
    est = estimate(stepped)  # intervals that do not meet: the shortest round trip's NTP value
    assert est is not None and est.uncertainty_s == pytest.approx(0.0015)
    assert estimate([ClockSample(0.0, float("nan"), 0.0, 0.0)]) is None
    assert estimate([ClockSample(1.0, 0.5, 0.0, 0.0)]) is None  # reply before request


def test_the_agent_reads_its_clock_on_arrival_and_after_the_hold() -> None:
    reply = run_check({"t": "check", "probes": ["clock"], "params": {"time_limit_s": 5.0},
                       "hold_s": 0.01}, "h1")
    assert reply["t_host"] - reply["t_host_recv"] >= 0.01
