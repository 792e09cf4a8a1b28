"""The controller's side of a host check: probes on every host at once, clock offsets, the
link-isolation rounds, and the verdicts.

It talks to the hosts only through :class:`HostRequests` (the agents' request and reply,
:class:`trainguard.agent.remote.RemoteAttempt`), so tests drive it with fakes and the real thing
runs it over the network.

    report = Checker(agents, status=print).run(hosts, CheckOptions())
    report.flagged()      # hosts judged slow or failed
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.check.clocksync import HOLDS_S as CLOCK_HOLDS_S
from trainguard.check.clocksync import SAMPLES as CLOCK_SAMPLES
from trainguard.check.clocksync import (
    ClockSample,
    estimate,
    offset_finding,
    reading,
    unmeasured_finding,
)
from trainguard.check.floors import Floors
from trainguard.check.judge import judge as judge_results
from trainguard.check.judge import summarize
from trainguard.check.model import Finding, Level, ProbeResult, Status
from trainguard.check.pairing import CHECK as LINK_CHECK
from trainguard.check.pairing import FIGURE as LINK_FIGURE
from trainguard.check.pairing import Isolator, Pair
from trainguard.check.probe_base import PROBE_TIMEOUT_S
from trainguard.check.probes import DEFAULT_PROBES


class HostRequests(Protocol):
    """The hosts' agents, asked and answered (:class:`trainguard.agent.remote.RemoteAttempt`)."""

    def request(self, nodes: Iterable[str], msg: Mapping[str, Any],
                timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        """The same message to each host at once; replies by host (silent hosts absent)."""

    def request_each(self, messages: Mapping[str, Mapping[str, Any]],
                     timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        """A message of its own to each host, all sent before any answer is awaited."""


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What to check and how hard."""

    probes: tuple[str, ...] | None = None
    """Probe names; None: the default set (:data:`trainguard.check.probes.DEFAULT_PROBES`)."""
    checkpoint_dir: str | None = None
    """The storage probe's directory, as the hosts see it; None: no storage probe."""
    time_limit_s: float = PROBE_TIMEOUT_S
    """Each probe's limit on its host."""
    expected_gpus: int | None = None
    links: bool = True
    """Measure the links between hosts and localize a slow host or link."""
    link_bytes: int | None = None
    link_timeout_s: float = 10.0
    collective: bool = True
    """After the probes and links, a ring-wide all-reduce over the hosts that passed (gloo, or
    NCCL with GPUs; torch on the hosts), through the agents."""
    ring_timeout_s: float | None = None
    """The ring-wide all-reduce's limit, and each subset round's when it failed; None: 60 s
    (or the agents' connect timeout, if longer) for the ring, 45 s per round."""
    max_clock_offset_s: float = 1.0
    """A host whose clock is off by more than this (beyond the measurement's uncertainty)
    fails: timestamps of its logs and metrics would be misread."""
    floors: Floors = field(default_factory=Floors)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """One check of a set of hosts."""

    hosts: tuple[str, ...]
    results: tuple[ProbeResult, ...]
    findings: tuple[Finding, ...]
    verdicts: Mapping[str, Level]
    link_rounds: int
    started: float
    duration_s: float
    links: tuple[tuple[str, str, float | None], ...] = ()
    """Every link measurement: (host, peer, MB/s or None when it could not be measured)."""
    floors: Mapping[str, float] = field(default_factory=dict)
    """The operator's floors the figures were judged against (figure name -> limit)."""

    def flagged(self) -> tuple[str, ...]:
        """Hosts judged slow or failed, in the order given."""
        return tuple(h for h in self.hosts if self.verdicts.get(h) in (Level.SLOW, Level.FAIL))

    def ok(self) -> bool:
        """No host flagged and no problem with the set as a whole."""
        return not self.problems()

    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level in (Level.SLOW, Level.FAIL))

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts),
                "verdicts": {h: self.verdicts.get(h, Level.PASS).value for h in self.hosts},
                "flagged": list(self.flagged()), "ok": self.ok(),
                "link_rounds": self.link_rounds,
                "started": self.started, "duration_s": round(self.duration_s, 3),
                "links": [{"host": a, "peer": b, "mbps": v} for a, b, v in self.links],
                "floors": dict(self.floors),
                "findings": [f.to_dict() for f in self.findings],
                "results": [r.to_dict() for r in self.results]}


def failed_checks(findings: Iterable[Finding]) -> dict[str, list[str]]:
    """The hosts with a FAIL finding, each with the checks it failed (in order, once each)."""
    out: dict[str, list[str]] = {}
    for f in findings:
        if f.level is Level.FAIL and f.kind == "host":
            checks = out.setdefault(f.subject, [])
            if f.check not in checks:
                checks.append(f.check)
    return out


def not_link_tested(host: str, checks: Sequence[str]) -> Finding:
    """SKIPPED: ``host`` failed ``checks`` already, so its links are not measured (a failed
    host would only slow the rounds and muddy the comparison of the others)."""
    return Finding(host, "host", Level.SKIPPED, LINK_CHECK,
                   f"not link-tested: it already failed {', '.join(checks)}", LINK_FIGURE)


def _repeat_note(confirming: Sequence[Pair], repeats: Sequence[Pair]) -> str:
    """Why a round measures pairs measured before (empty when it does not)."""
    def names(pairs: Iterable[Pair]) -> str:
        return ", ".join(f"{a}-{b}" for a, b in pairs)

    notes = []
    if confirming:
        notes.append(f"{names(confirming)} again, to confirm a slow result (both hosts are "
                     "fine with other partners)")
    controls = [p for p in repeats if p not in confirming]
    if controls:
        notes.append(f"{names(controls)} again, as this round's yardstick")
    return "; " + "; ".join(notes) if notes else ""


def silent_finding(host: str, what: str, timeout_s: float) -> Finding:
    """FAIL: the host's agent did not answer ``what`` in time."""
    return Finding(host, "host", Level.FAIL, what,
                   f"{what}: no answer from its agent within {timeout_s:g} s")


class Checker:
    """Runs one check (see the module docstring)."""

    def __init__(self, agents: HostRequests, *, clock: Callable[[], float] = time.time,
                 status: Callable[[str], None] = lambda _: None) -> None:
        self._agents = agents
        self._request = agents.request
        self._link_log: list[tuple[str, str, float | None]] = []
        self._silent: set[str] = set()
        """Hosts whose agent did not answer a round: left out of the link rounds."""
        self._machine: dict[str, str] = {}
        """Each host's machine (kernel boot id), where it told: hosts sharing one are measured
        one after another, so that they do not measure each other."""
        self._clock = clock
        self._status = status

    def run(self, hosts: Sequence[str], options: CheckOptions,
            unreachable: Mapping[str, str] | None = None) -> CheckReport:
        """``unreachable``: hosts whose agent never connected, with the reason: each fails,
        and the others are checked."""
        started = self._clock()
        findings = [Finding(h, "host", Level.FAIL, "agent", f"unreachable: {why}")
                    for h, why in (unreachable or {}).items()]
        live = [h for h in hosts if h not in (unreachable or {})]
        findings += self._clocks(live, options)
        results, silent = self._probes(live, options, findings)
        self._silent |= silent
        verdicts_first = judge_results(results, options.floors)
        suspects = sorted({f.subject for f in verdicts_first if f.level is Level.SLOW})
        if suspects:
            # Never accuse on one measurement: a moment of load elsewhere on the machine, or a
            # burst of the host's own daemons, must not take a healthy host out of service.
            self._status(f"confirming {', '.join(suspects)}: measured again")
            again, _ = self._probes(suspects, options, [])
            # each figure at its best over both attempts (the judge's own merge)
            results = [*results, *(r for r in again if r.status is Status.OK)]
            verdicts_first = judge_results(results, options.floors)
        findings += verdicts_first
        rounds = 0
        if options.links and len(hosts) >= 2:
            failed = failed_checks(findings)
            findings += [not_link_tested(h, failed[h]) for h in hosts if h in failed]
            linked = [h for h in live if h not in self._silent and h not in failed]
            if len(linked) >= 2:
                link_findings, rounds = self._links(linked, options)
                findings += link_findings
            elif linked:
                findings.append(Finding(linked[0], "host", Level.SKIPPED, LINK_CHECK,
                                        "not link-tested: every other host failed before the "
                                        "link rounds", LINK_FIGURE))
        verdicts = {h: Level.PASS for h in hosts}
        verdicts.update({h: v for h, v in summarize(findings).items() if h in verdicts})
        return CheckReport(tuple(hosts), tuple(results), tuple(findings), verdicts, rounds,
                           started, self._clock() - started, tuple(self._link_log),
                           dict(options.floors.limits))

    # -- steps -------------------------------------------------------------------------------

    def _clocks(self, hosts: Sequence[str], options: CheckOptions) -> list[Finding]:
        """Each host's clock offset from several samples (:mod:`trainguard.check.clocksync`);
        also learns which hosts share a machine."""
        findings = []
        timeout = 10.0
        samples: dict[str, list[ClockSample]] = {h: [] for h in hosts}
        answered: list[str] = list(hosts)
        for i, hold in enumerate(CLOCK_HOLDS_S[:CLOCK_SAMPLES]):
            sent = self._clock()
            replies = self._request(answered, {"t": "check", "probes": ["clock"],
                                               "params": {"time_limit_s": 5.0},
                                               "hold_s": hold}, timeout if i == 0 else 2.0)
            received = self._clock()
            if i == 0:  # silent at the first: left out of everything after
                for h in hosts:
                    if h not in replies:
                        self._silent.add(h)
                        findings.append(silent_finding(h, "clock", timeout))
                answered = [h for h in hosts if h in replies]
                for h in answered:
                    machine = replies[h].get("machine")
                    if isinstance(machine, str) and machine:
                        self._machine[h] = machine
            for h, reply in replies.items():
                t_host = reading(reply.get("t_host"))
                t_arrived = reading(reply.get("t_host_recv", reply.get("t_host")))
                if h in samples and t_host is not None and t_arrived is not None:
                    samples[h].append(ClockSample(sent, received, t_arrived, t_host))
        for h in answered:
            est = estimate(samples[h])
            findings.append(unmeasured_finding(h, options.max_clock_offset_s) if est is None
                            else offset_finding(h, est.offset_s, est.uncertainty_s,
                                                options.max_clock_offset_s))
        return findings

    def _probes(self, hosts: Sequence[str], options: CheckOptions,
                findings: list[Finding]) -> tuple[list[ProbeResult], set[str]]:
        """The hosts' probe results, and the hosts that did not answer (each with a FAIL
        finding added to ``findings``)."""
        names = options.probes
        count = len(names) if names is not None else len(DEFAULT_PROBES)
        timeout = options.time_limit_s * count + 15.0
        self._status(f"probes on {len(hosts)} host(s) (each probe at most "
                     f"{options.time_limit_s:g} s)")
        msg: dict[str, Any] = {"t": "check", "params": {
            "time_limit_s": options.time_limit_s, "checkpoint_dir": options.checkpoint_dir,
            "expected_gpus": options.expected_gpus}}
        if names is not None:
            msg["probes"] = list(names)
        replies: dict[str, Mapping[str, Any]] = {}
        planned = waves(hosts, self._machine)
        if len(planned) > 1:
            self._status(f"hosts share machines: probes in {len(planned)} waves, so that no two "
                         "hosts of one machine measure each other")
        for i, wave in enumerate(planned):
            if len(planned) > 1:
                self._status(f"probes, wave {i + 1}/{len(planned)}: {', '.join(wave)}")
            replies.update(self._request(wave, msg, timeout))
        results: list[ProbeResult] = []
        silent: set[str] = set()
        for h in hosts:
            reply = replies.get(h)
            if reply is None:
                silent.add(h)
                findings.append(silent_finding(h, "probes", timeout))
                continue
            if "error" in reply:
                findings.append(Finding(h, "host", Level.FAIL, "probes",
                                        str(reply["error"])[:500]))
                continue
            raw = reply.get("results")
            for item in raw if isinstance(raw, list) else []:
                try:
                    result = ProbeResult.from_dict(item)
                except (KeyError, TypeError, ValueError) as exc:
                    findings.append(Finding(h, "host", Level.FAIL, "probes",
                                            f"unreadable result from its agent: {exc}"))
                    continue
                results.append(result if result.host == h else _rehost(result, h))
        return results, silent

    def _links(self, hosts: Sequence[str], options: CheckOptions) -> tuple[list[Finding], int]:
        iso = Isolator(hosts)
        while (pairs := iso.next_round()) is not None:
            self._status(f"links, round {iso.rounds + 1}: {len(pairs)} pair(s) "
                         f"({', '.join(f'{a}-{b}' for a, b in pairs)})"
                         + _repeat_note(iso.confirming(pairs), iso.repeats(pairs)))
            iso.record(self.measure_pairs(pairs, options))
        return [*iso.findings(), *iso.confirmations()], iso.rounds

    def measure_pairs(self, pairs: Sequence[Pair],
                      options: CheckOptions) -> dict[Pair, float | None]:
        """The links of disjoint ``pairs``, measured at once except where pairs share a
        machine: each pair's second host serves, its first measures. A pair that could not be
        measured is None (broken)."""
        out: dict[Pair, float | None] = {}
        for batch in pair_waves(pairs, self._machine):
            out.update(self._measure_batch(batch, options))
        self._link_log += [(a, b, v) for (a, b), v in out.items()]
        return out

    def _measure_batch(self, pairs: Sequence[Pair],
                       options: CheckOptions) -> dict[Pair, float | None]:
        out: dict[Pair, float | None] = {p: None for p in pairs}
        if not pairs:
            return out
        tokens = {p: secrets.token_hex(16) for p in pairs}
        wait = options.link_timeout_s + 5.0
        servers = self._agents.request_each(
            {b: {"t": "link_serve", "token": token, "timeout_s": wait}
             for (_, b), token in tokens.items()}, 10.0)
        probes: dict[str, dict[str, Any]] = {}
        for (a, b), token in tokens.items():
            served = servers.get(b)
            if served is None or "port" not in served:
                continue
            probes[a] = {"t": "link_probe", "addr": served.get("addr"),
                         "port": served.get("port"), "token": token, "peer": b,
                         "nbytes": options.link_bytes, "timeout_s": options.link_timeout_s}
        replies = self._agents.request_each(probes, wait + 5.0) if probes else {}
        for a, b in pairs:
            raw = replies.get(a, {}).get("result")
            if not isinstance(raw, Mapping):
                continue
            try:
                result = ProbeResult.from_dict(raw)
            except (KeyError, TypeError, ValueError):
                continue
            fig = result.figure(LINK_FIGURE)
            if result.status is Status.OK and fig is not None:
                out[(a, b)] = fig.value
        return out


def waves(hosts: Sequence[str], machine: Mapping[str, str]) -> list[list[str]]:
    """``hosts`` in waves that never hold two hosts of one machine (hosts of unknown machine
    count as machines of their own). Distinct machines: one wave of all."""
    out: list[list[str]] = []
    for host in hosts:
        m = machine.get(host) or f"host:{host}"
        for wave in out:
            if all((machine.get(h) or f"host:{h}") != m for h in wave):
                wave.append(host)
                break
        else:
            out.append([host])
    return out


def pair_waves(pairs: Sequence[Pair], machine: Mapping[str, str]) -> list[list[Pair]]:
    """Disjoint ``pairs`` in batches whose pairs use no machine twice."""
    out: list[tuple[set[str], list[Pair]]] = []
    for a, b in pairs:
        used = {machine.get(a) or f"host:{a}", machine.get(b) or f"host:{b}"}
        for machines, batch in out:
            if not machines & used:
                machines |= used
                batch.append((a, b))
                break
        else:
            out.append((set(used), [(a, b)]))
    return [batch for _, batch in out]


def _rehost(result: ProbeResult, host: str) -> ProbeResult:
    """A result is the answering host's, whatever it calls itself."""
    return ProbeResult(result.check, host, result.status, result.figures, result.reason,
                       result.duration_s, result.facts)


__all__ = [
    "CheckOptions",
    "CheckReport",
    "Checker",
    "HostRequests",
    "failed_checks",
    "not_link_tested",
    "offset_finding",
    "pair_waves",
    "silent_finding",
    "waves",
]
