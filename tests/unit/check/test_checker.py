"""The controller's side of a host check, driven through fake agents (the real ones are in
tests/integration/test_multihost_check.py)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from trainguard.check.checker import Checker, CheckOptions, pair_waves, waves
from trainguard.check.clocksync import SAMPLES as CLOCK_SAMPLES
from trainguard.check.floors import Floors
from trainguard.check.model import Figure, Level, ProbeResult, Status


class FakeAgents:
    """Hosts that answer like agents: figures drawn around a per-host speed."""

    def __init__(self, hosts: list[str], *, cpu: Mapping[str, float] | None = None,
                 nic: Mapping[str, float] | None = None, silent: Iterable[str] = (),
                 machine: Mapping[str, str] | None = None, clock_skew: Mapping[str, float]
                 | None = None, transient: Iterable[str] = (), seed: int = 0) -> None:
        self.hosts = hosts
        self.cpu = dict(cpu or {})
        self.nic = dict(nic or {})
        self.silent = set(silent)
        self.machine = dict(machine or {})
        self.skew = dict(clock_skew or {})
        self.transient = set(transient)
        """Hosts slow on their first measurement only (a moment of load)."""
        self.rng = random.Random(seed)
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.now = 1000.0
        self._served: dict[str, str] = {}

    def clock(self) -> float:
        self.now += 0.001
        return self.now

    def _noise(self) -> float:
        return self.rng.uniform(0.9, 1.1)

    def _reply(self, host: str, msg: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if host in self.silent:
            return None
        kind = msg["t"]
        if kind == "check":
            names = msg.get("probes") or ["cpu_gemm"]
            results = []
            for name in names:
                if name == "clock":
                    continue
                value = 50.0 * self.cpu.get(host, 1.0) * self._noise()
                if host in self.transient:
                    self.transient.discard(host)
                    value *= 0.2
                results.append(ProbeResult(name, host, Status.OK,
                                           (Figure("gemm_gflops", value, "GFLOP/s"),)).to_dict())
            return {"results": results, "t_host": self.now + self.skew.get(host, 0.0),
                    "machine": self.machine.get(host, host)}
        if kind == "link_serve":
            self._served[host] = str(msg["token"])
            return {"addr": f"10.0.0.{self.hosts.index(host)}", "port": 4000}
        if kind == "link_probe":
            peer = str(msg["peer"])
            assert self._served[peer] == msg["token"]
            mbps = 2000.0 * min(self.nic.get(host, 1.0), self.nic.get(peer, 1.0)) * self._noise()
            return {"result": ProbeResult("link", host, Status.OK,
                                          (Figure("link_mbps", mbps, "MB/s"),)).to_dict()}
        raise AssertionError(kind)

    def request(self, nodes: Iterable[str], msg: Mapping[str, Any],
                timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        return self.request_each({n: msg for n in nodes}, timeout_s)

    def request_each(self, messages: Mapping[str, Mapping[str, Any]],
                     timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        kinds = {str(m["t"]) for m in messages.values()}
        self.calls.append(("/".join(sorted(kinds)), tuple(messages)))
        out = {}
        for host, msg in messages.items():
            reply = self._reply(host, msg)
            if reply is not None:
                out[host] = reply
        return out


HOSTS = [f"n{i}" for i in range(1, 9)]
OPTS = CheckOptions(probes=("cpu_gemm",))


def run(agents: FakeAgents, hosts: list[str] | None = None, **kw: Any) -> Any:
    return Checker(agents, clock=agents.clock).run(hosts or agents.hosts, OPTS, **kw)


def test_healthy_hosts_pass_over_many_seeds() -> None:
    for seed in range(30):
        report = run(FakeAgents(HOSTS, seed=seed))
        assert report.flagged() == (), [f.reason for f in report.problems()]
        assert set(report.verdicts.values()) == {Level.PASS}


def test_a_slow_cpu_is_named_with_its_figure() -> None:
    report = run(FakeAgents(HOSTS, cpu={"n5": 0.2}))
    assert report.flagged() == ("n5",)
    (finding,) = [f for f in report.problems()]
    assert finding.check == "cpu_gemm" and "GFLOP/s" in finding.reason


def test_a_slow_nic_is_localized_to_its_host() -> None:
    report = run(FakeAgents(HOSTS, nic={"n3": 0.1}))
    assert report.flagged() == ("n3",), [f.reason for f in report.problems()]
    assert report.link_rounds <= 3


def test_silent_and_unreachable_hosts_fail_and_the_rest_is_checked() -> None:
    agents = FakeAgents(HOSTS, silent={"n2"})
    report = run(agents, unreachable={"n8": "its agent did not connect within 60 s"})
    assert set(report.flagged()) == {"n2", "n8"}
    assert any("no answer" in f.reason for f in report.findings if f.subject == "n2")
    assert any("did not connect" in f.reason for f in report.findings if f.subject == "n8")
    # the links were measured among the hosts that answer
    probed = {h for kind, hosts in agents.calls if kind == "link_probe" for h in hosts}
    assert probed and not probed & {"n2", "n8"}


def test_a_skewed_clock_fails() -> None:
    report = run(FakeAgents(HOSTS, clock_skew={"n4": 5.0}))
    assert report.flagged() == ("n4",)
    assert any(f.check == "clock" and f.level is Level.FAIL for f in report.findings)


def test_hosts_sharing_a_machine_are_measured_apart() -> None:
    agents = FakeAgents(HOSTS[:4], machine={h: "box" for h in HOSTS[:4]})
    report = run(agents)
    assert report.flagged() == ()
    probe_calls = [hosts for kind, hosts in agents.calls if kind == "check"][CLOCK_SAMPLES:]
    assert probe_calls == [(h,) for h in HOSTS[:4]]  # one host at a time
    assert all(len(hosts) == 1 for kind, hosts in agents.calls if kind == "link_probe")


def test_waves() -> None:
    assert waves(["a", "b", "c"], {}) == [["a", "b", "c"]]
    assert waves(["a", "b", "c"], {"a": "m", "b": "m"}) == [["a", "c"], ["b"]]
    assert pair_waves([("a", "b"), ("c", "d")], {}) == [[("a", "b"), ("c", "d")]]
    assert pair_waves([("a", "b"), ("c", "d")], {"a": "m", "c": "m"}) == \
        [[("a", "b")], [("c", "d")]]


def test_a_moment_of_load_is_not_an_accusation() -> None:
    agents = FakeAgents(HOSTS, transient={"n2"})
    report = run(agents)
    assert report.flagged() == ()
    probed = [hosts for kind, hosts in agents.calls if kind == "check"]
    assert ("n2",) in probed  # measured again before any verdict


def test_a_host_slow_twice_is_flagged() -> None:
    agents = FakeAgents(HOSTS, cpu={"n2": 0.2})
    assert run(agents).flagged() == ("n2",)


def _linked(agents: FakeAgents) -> set[str]:
    """Every host that served or probed a link."""
    return {h for kind, hosts in agents.calls if kind.startswith("link_") for h in hosts}


def test_a_host_that_failed_a_probe_is_not_link_tested() -> None:
    agents = FakeAgents(HOSTS, cpu={"n5": 0.2})
    options = CheckOptions(probes=("cpu_gemm",), floors=Floors.from_mapping({"gemm_gflops": 30}))
    report = Checker(agents, clock=agents.clock).run(HOSTS, options)
    assert report.flagged() == ("n5",)
    assert "n5" not in _linked(agents) and _linked(agents) == set(HOSTS) - {"n5"}
    assert all("n5" not in (a, b) for a, b, _ in report.links)
    (note,) = [f for f in report.findings if f.subject == "n5" and f.check == "link"]
    assert note.level is Level.SKIPPED
    assert note.reason == "not link-tested: it already failed cpu_gemm"
    assert report.verdicts["n5"] is Level.FAIL  # the note does not soften the verdict


def test_a_slow_host_is_still_link_tested() -> None:
    agents = FakeAgents(HOSTS, cpu={"n5": 0.2})
    report = run(agents)
    assert report.flagged() == ("n5",) and "n5" in _linked(agents)
    assert not [f for f in report.findings if f.level is Level.SKIPPED]


def test_the_last_host_standing_says_its_links_were_not_measured() -> None:
    agents = FakeAgents(["a", "b"], cpu={"b": 0.2})
    options = CheckOptions(probes=("cpu_gemm",), floors=Floors.from_mapping({"gemm_gflops": 30}))
    report = Checker(agents, clock=agents.clock).run(["a", "b"], options)
    assert report.link_rounds == 0 and not _linked(agents)
    reasons = {f.subject: f.reason for f in report.findings if f.check == "link"}
    assert reasons == {"a": "not link-tested: every other host failed before the link rounds",
                       "b": "not link-tested: it already failed cpu_gemm"}
    assert report.verdicts == {"a": Level.PASS, "b": Level.FAIL}


def test_a_repeated_pair_is_announced_and_reported() -> None:
    class Hiccup(FakeAgents):
        """The first link measured is slow (a moment of load), the rest are not."""

        first = True

        def _reply(self, host: str, msg: Mapping[str, Any]) -> Mapping[str, Any] | None:
            reply = super()._reply(host, msg)
            if msg["t"] == "link_probe" and self.first and reply is not None:
                self.first = False
                return {"result": ProbeResult("link", host, Status.OK,
                                              (Figure("link_mbps", 200.0, "MB/s"),)).to_dict()}
            return reply

    agents = Hiccup(HOSTS[:4])
    said: list[str] = []
    report = Checker(agents, clock=agents.clock, status=said.append).run(HOSTS[:4], OPTS)
    assert report.ok() and report.link_rounds == 3
    (third,) = [s for s in said if s.startswith("links, round 3")]
    assert "n1-n2 again, to confirm a slow result" in third
    assert "n3-n4 again, as this round's yardstick" in third
    (note,) = [f for f in report.findings if f.kind == "link"]
    assert note.level is Level.PASS and "re-measured in round 3 to confirm" in note.reason
