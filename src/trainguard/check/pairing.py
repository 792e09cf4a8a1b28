"""Localize a slow host or link from pairwise link measurements (pure: no I/O).

The controller drives :class:`Isolator` round by round; the pairs of one round are disjoint, so
they can be measured in parallel::

    iso = Isolator(["node0", "node1", "node2", "node3"])
    while (pairs := iso.next_round()) is not None:
        iso.record({pair: measure(pair) for pair in pairs})   # link_mbps, or None on an error
    findings = iso.findings()

Outline:

1. Survey: a perfect matching of the hosts (with 2-3 hosts, the whole ring instead: one pair
   has nothing to be compared with). Each pair is judged against the median of the OTHER
   survey pairs with the hosts' dual rule: slow when below ``ratio`` x the centre AND more than
   ``mad_z`` MADs below it (MAD floored at ``mad_floor`` x the centre, so equal pairs do not
   give zero spread). An error (None) is "broken"; below the operator's ``floor_mbps`` is a
   failure whatever the others do.
2. If more than half of the survey pairs are bad, nothing is localized: one "cluster" finding.
3. Otherwise hosts in a good pair are known good. Each host of a bad pair (and the odd host
   out) is measured with a known-good partner it has not been paired with yet. A host that is
   bad with two distinct partners, one of them known good, is at fault; a bad pair whose two
   hosts are both good elsewhere is re-measured once and, if still bad, is the link itself.
   Hosts that find no free good partner wait for the next round; one faulty host takes 2
   rounds (3 with an odd host out).
4. Good hosts left idle in a later round measure each other (up to ``controls`` pairs, links
   not measured yet first): a later measurement is slow only against the survey AND against
   the same round's other pairs, so a load swing between rounds does not read as a slow host.

A round never runs for controls alone. The one deliberate repeat is step 3's re-measure of a
bad pair whose hosts are good elsewhere: :meth:`Isolator.confirming` names it while the round is
planned, and :meth:`Isolator.confirmations` reports each such pair that came back fine (PASS,
with both figures), so a healthy set that took an extra round says why.

Limits, by construction: the comparison is relative, so a uniform slowdown shows only against
``floor_mbps``; with 3 hosts one slow host slows 2 of the 3 links, which reads as "cluster".
A "cluster" finding has ``kind="cluster"`` and names no host.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainguard.check.model import Finding, Level, link_name
from trainguard.errors import ConfigError

Pair = tuple[str, str]
FIGURE = "link_mbps"
CHECK = "link"


@dataclass(frozen=True, slots=True)
class PairThresholds:
    """When a pair's ``link_mbps`` counts as slow. Defaults are wide on purpose: noise on shared
    machines moves a pair by tens of percent, a throttled link by 10x."""

    ratio: float = 0.6
    """Slow only below this fraction of the reference centre..."""
    mad_z: float = 5.0
    """...and more than this many MADs below it."""
    mad_floor: float = 0.05
    """The MAD is at least this fraction of the centre."""
    floor_mbps: float | None = None
    """Operator floor: a pair below it fails, whatever the other pairs do."""
    max_bad_fraction: float = 0.5
    """More than this fraction of bad survey pairs: the whole set is degraded."""

    def __post_init__(self) -> None:
        if not 0.0 < self.ratio < 1.0:
            raise ConfigError(f"link.ratio must be in (0, 1), got {self.ratio}")
        if not (math.isfinite(self.mad_z) and self.mad_z > 0):
            raise ConfigError(f"link.mad_z must be > 0, got {self.mad_z}")
        if not 0.0 <= self.mad_floor < 1.0:
            raise ConfigError(f"link.mad_floor must be in [0, 1), got {self.mad_floor}")
        if self.floor_mbps is not None and not (math.isfinite(self.floor_mbps)
                                                and self.floor_mbps >= 0):
            raise ConfigError(f"link.floor_mbps must be >= 0, got {self.floor_mbps}")
        if not 0.0 < self.max_bad_fraction <= 1.0:
            raise ConfigError(f"link.max_bad_fraction must be in (0, 1], "
                              f"got {self.max_bad_fraction}")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One recorded pair: its value and how it was judged (``ok``, ``slow``, ``floor``,
    ``broken``)."""

    pair: Pair
    value: float | None
    verdict: str
    round: int

    @property
    def bad(self) -> bool:
        return self.verdict != "ok"


def ring_pairs(hosts: Sequence[str]) -> list[Pair]:
    """Each host with its successor, the last with the first (one pair for 2 hosts)."""
    n = len(hosts)
    if n < 2:
        return []
    if n == 2:
        return [(hosts[0], hosts[1])]
    return [(hosts[i], hosts[(i + 1) % n]) for i in range(n)]


def ring_rounds(hosts: Sequence[str]) -> list[list[Pair]]:
    """The ring split into rounds of disjoint pairs: even edges, odd edges, and for an odd
    count the closing edge alone (3 rounds of one pair for 3 hosts)."""
    edges = ring_pairs(hosts)
    rounds: list[list[Pair]] = []
    for edge in edges:
        target = next((r for r in rounds if not {h for p in r for h in p} & set(edge)), None)
        if target is None:
            rounds.append([edge])
        else:
            target.append(edge)
    return rounds


def _centre_spread(values: Sequence[float], th: PairThresholds) -> tuple[float, float] | None:
    """Median, and the MAD of the values not themselves below ``ratio`` x the median: those
    are suspects, not noise (with 3-4 pairs, one other slow pair would otherwise widen the
    spread so much that nothing could be slow)."""
    if not values:
        return None
    centre = statistics.median(values)
    inliers = [v for v in values if v >= th.ratio * centre]
    mid = statistics.median(inliers)
    mad = statistics.median([abs(v - mid) for v in inliers])
    return centre, max(mad, th.mad_floor * centre)


class Isolator:
    """The state machine: :meth:`next_round` -> measure -> :meth:`record`, then
    :meth:`findings`."""

    def __init__(self, hosts: Sequence[str], thresholds: PairThresholds | None = None,
                 *, max_rounds: int | None = None, controls: int = 2) -> None:
        names = [str(h) for h in hosts]
        if not names:
            raise ConfigError("link check: no hosts to check")
        if any(not h or "<->" in h for h in names):
            raise ConfigError("link check: host names must be non-empty and not contain '<->'")
        if len(set(names)) != len(names):
            dup = sorted({h for h in names if names.count(h) > 1})
            raise ConfigError(f"link check: duplicate host(s) {', '.join(dup)}")
        self.hosts = tuple(names)
        self.th = thresholds or PairThresholds()
        # A safety stop only: planning normally ends in 2-4 rounds.
        self.max_rounds = max_rounds or 4 + 2 * max(1, math.ceil(math.log2(max(2, len(names)))))
        self.rounds = 0
        self.controls = controls
        self._survey = (ring_rounds(names) if len(names) <= 3
                        else [[(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]])
        self._pending: list[Pair] | None = None
        self._measured: list[Measurement] = []
        self._reference: tuple[float, float] | None = None
        self._cluster: Finding | None = None
        self._stalled: set[str] = set()
        self._surveyed = False
        self._done = len(names) < 2

    # -- driving -----------------------------------------------------------------------------
    def next_round(self) -> list[Pair] | None:
        """The next round's disjoint pairs, or None when nothing is left to measure."""
        if self._pending is not None:
            raise RuntimeError("record() the previous round before asking for the next")
        if self._done:
            return None
        if self._survey:
            pairs = self._survey.pop(0)
        else:
            pairs = self._plan() if self.rounds < self.max_rounds else []
        if not pairs:
            self._done = True
            return None
        self._pending = list(pairs)
        return list(pairs)

    def record(self, results: Mapping[Pair, float | None]) -> None:
        """Record one round: pair -> link_mbps (None = the measurement failed)."""
        if self._pending is None:
            raise RuntimeError("record() without a round in progress")
        got = {link_name(*p): v for p, v in results.items()}
        want = {link_name(*p): p for p in self._pending}
        if missing := sorted(set(want) - set(got)):
            raise ConfigError(f"link check: no result for pair {missing[0]}")
        if extra := sorted(set(got) - set(want)):
            raise ConfigError(f"link check: {extra[0]} was not in this round")
        self.rounds += 1
        values: dict[Pair, float | None] = {}
        for name, pair in want.items():
            value = got[name]
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"link check: {name} must be a finite value >= 0, got {value}")
            values[pair] = None if value is None else float(value)
        self._pending = None
        if not self._surveyed and not self._survey:
            self._surveyed = True
            self._judge_survey(values)
        else:
            self._judge_later(values)

    # -- judging -----------------------------------------------------------------------------
    def _verdict(self, value: float | None, ref: tuple[float, float] | None) -> str:
        if value is None:
            return "broken"
        if self.th.floor_mbps is not None and value < self.th.floor_mbps:
            return "floor"
        if ref is None:
            return "ok"
        centre, spread = ref
        slow = value < self.th.ratio * centre and centre - value > self.th.mad_z * spread
        return "slow" if slow else "ok"

    def _judge_later(self, values: Mapping[Pair, float | None]) -> None:
        """A later round: slow against the survey AND against the same round's other pairs
        (its control pairs, when there were free good hosts). Load on the machines moves a
        whole round up or down; measurements taken at the same moment are the fair yardstick."""
        for pair, value in values.items():
            verdict = self._verdict(value, self._reference)
            others = [v for p, v in values.items() if p != pair and v is not None]
            if verdict == "slow" and others:
                verdict = self._verdict(value, _centre_spread(others, self.th))
            self._add(pair, value, verdict)

    def _add(self, pair: Pair, value: float | None, verdict: str) -> None:
        self._measured.append(Measurement(pair, value, verdict, self.rounds))

    def _judge_survey(self, last: Mapping[Pair, float | None]) -> None:
        # Survey rounds before the last were held back (ring of 3): judge them all together.
        held = [(m.pair, m.value) for m in self._measured]
        self._measured.clear()
        survey = [*held, *last.items()]
        for i, (pair, value) in enumerate(survey):
            others = [v for j, (_, v) in enumerate(survey) if j != i and v is not None]
            ref = _centre_spread(others, self.th)
            self._add(pair, value, self._verdict(value, ref))
        good = [m.value for m in self._measured if not m.bad and m.value is not None]
        self._reference = _centre_spread(good, self.th)
        bad = [m for m in self._measured if m.bad]
        if len(survey) >= 2 and len(bad) > self.th.max_bad_fraction * len(survey):
            self._cluster = self._cluster_finding(bad, len(survey))
            self._done = True

    # -- host states -------------------------------------------------------------------------
    def _good_hosts(self) -> set[str]:
        return {h for m in self._measured if not m.bad for h in m.pair}

    def _faulty_hosts(self, good: set[str]) -> set[str]:
        faulty = set()
        for h in self.hosts:
            if h in good:
                continue
            partners = {p for m in self._measured if m.bad and h in m.pair
                        for p in m.pair if p != h}
            if len(partners) >= 2 and partners & good:
                faulty.add(h)
        return faulty

    def _link_state(self, pair: Pair) -> list[Measurement]:
        name = link_name(*pair)
        return [m for m in self._measured if link_name(*m.pair) == name]

    def _first_bad(self, faulty: set[str]) -> list[Measurement]:
        """Each link's first bad measurement, for links between hosts no fault explains."""
        out: list[Measurement] = []
        seen: set[str] = set()
        for m in self._measured:
            name = link_name(*m.pair)
            if not m.bad or name in seen or set(m.pair) & faulty:
                continue
            seen.add(name)
            out.append(m)
        return out

    def _unexplained(self, faulty: set[str]) -> list[Pair]:
        """Bad pairs that no faulty host explains and that no later measurement cleared."""
        return [m.pair for m in self._first_bad(faulty)
                if all(x.bad for x in self._link_state(m.pair))]

    def _plan(self) -> list[Pair]:
        good = self._good_hosts()
        faulty = self._faulty_hosts(good)
        unexplained = self._unexplained(faulty)
        used: set[str] = set()
        pairs: list[Pair] = []
        # 1. A bad pair between two hosts good elsewhere: re-measure once before naming it.
        for a, b in unexplained:
            if {a, b} <= good and len(self._link_state((a, b))) < 2 and not {a, b} & used:
                pairs.append((a, b))
                used |= {a, b}
        # 2. Undecided hosts of bad pairs, and hosts never measured: test with a good partner.
        needy = [h for h in self.hosts if h not in good and h not in faulty
                 and h not in self._stalled
                 and (any(h in p for p in unexplained) or not self._partners(h))]
        for h in needy:
            if h in used:
                continue
            candidates = [g for g in self.hosts if g in good and g != h
                          and g not in self._partners(h)]
            if not candidates:
                self._stalled.add(h)    # nobody left to compare with: reported as it stands
                continue
            free = [g for g in candidates if g not in used]
            if free:
                pairs.append((h, free[0]))
                used |= {h, free[0]}
        # 3. Controls: good hosts left idle measure each other, the round's own yardstick.
        if not pairs:
            return []
        idle = [g for g in self.hosts if g in good and g not in used]
        return pairs + self._controls(idle)

    def _controls(self, idle: Sequence[str]) -> list[Pair]:
        """Up to ``controls`` disjoint pairs of ``idle`` hosts, links not measured yet first:
        a control is the round's yardstick either way, and a new one also tests a link."""
        bad = {link_name(*m.pair) for m in self._measured if m.bad}
        free = list(idle)
        fresh: list[Pair] = []
        for g in idle:
            if g not in free:
                continue
            partner = next((h for h in free if h != g and h not in self._partners(g)), None)
            if partner is not None:
                fresh.append((g, partner))
                free.remove(g)
                free.remove(partner)
        again = [(free[i], free[i + 1]) for i in range(0, len(free) - 1, 2)]
        # never a link already seen slow: it would drag the yardstick down
        return [p for p in (*fresh, *again) if link_name(*p) not in bad][:self.controls]

    def repeats(self, pairs: Sequence[Pair]) -> list[Pair]:
        """Those of ``pairs`` already measured in an earlier round: a slow pair re-measured
        to confirm it, or a control pair measured again as the round's yardstick."""
        done = {link_name(*m.pair) for m in self._measured}
        return [p for p in pairs if link_name(*p) in done]

    def confirming(self, pairs: Sequence[Pair]) -> list[Pair]:
        """Those of ``pairs`` that re-measure a bad pair (its hosts good with other partners),
        to tell a passing moment from a slow link."""
        bad = {link_name(*m.pair) for m in self._measured if m.bad}
        good = self._good_hosts()
        return [p for p in pairs if link_name(*p) in bad and set(p) <= good]

    def _partners(self, h: str) -> set[str]:
        return {p for m in self._measured if h in m.pair for p in m.pair if p != h}

    # -- results -----------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """Hosts and links at fault (SLOW, or FAIL for errors and floors), or one "cluster"
        finding; empty when every link is fine."""
        if len(self.hosts) < 2:
            return [Finding(self.hosts[0], "host", Level.SKIPPED, CHECK,
                            "1 host: no link to measure", FIGURE)]
        if self._cluster is not None:
            return [self._cluster]
        good = self._good_hosts()
        faulty = self._faulty_hosts(good)
        out = [self._host_finding(h) for h in self.hosts if h in faulty]
        out += [self._link_finding(p, good) for p in self._unexplained(faulty)]
        return out

    def confirmations(self) -> list[Finding]:
        """PASS, one per link that was bad once and fine when measured again (a passing
        moment, not a fault): why the check took a round more, with the figures."""
        good = self._good_hosts()
        faulty = self._faulty_hosts(good)
        out: list[Finding] = []
        for m in self._first_bad(faulty):
            name = link_name(*m.pair)
            later = [x for x in self._link_state(m.pair) if x.round > m.round and not x.bad]
            if not later:
                continue
            ok = later[0]
            out.append(Finding(
                name, "link", Level.PASS, CHECK,
                f"link {name}: {_mbps(m.value)} in round {m.round} ({m.verdict}), re-measured "
                f"in round {ok.round} to confirm: {_mbps(ok.value)}, fine; a passing moment, "
                f"not a fault ({self._ref_text()})", FIGURE, ok.value, self._centre()))
        return out

    def _ref_text(self) -> str:
        if self._reference is None:
            return "no good pair to compare with"
        return f"good pairs' median {_mbps(self._reference[0])}"

    def _level(self, ms: Sequence[Measurement]) -> Level:
        return Level.FAIL if any(m.verdict in ("broken", "floor") for m in ms) else Level.SLOW

    def _host_finding(self, h: str) -> Finding:
        bad = [m for m in self._measured if m.bad and h in m.pair]
        parts = [f"{_mbps(m.value)} with {next(p for p in m.pair if p != h)}" for m in bad]
        values = [m.value for m in bad if m.value is not None]
        return Finding(h, "host", self._level(bad), CHECK,
                       f"host {h}: {_join(parts)} ({self._ref_text()}{self._floor_text(bad)})",
                       FIGURE, max(values) if values else None, self._centre())

    def _link_finding(self, pair: Pair, good: set[str]) -> Finding:
        name = link_name(*pair)
        ms = self._link_state(pair)
        seen = " then ".join(_mbps(m.value) for m in ms)
        if {*pair} <= good:
            why = " while both hosts are fine with other partners"
        elif len(self.hosts) == 2:
            why = ("; 2 hosts: one pair, compared with the floor only, so the host cannot be "
                   "told from the link")
        else:
            alone = " and ".join(h for h in pair if h not in good)
            why = f"; cannot tell the host from the link: no other good host to test {alone} with"
        values = [m.value for m in ms if m.value is not None]
        return Finding(name, "link", self._level(ms), CHECK,
                       f"link {name}: {seen}{why} ({self._ref_text()}{self._floor_text(ms)})",
                       FIGURE, max(values) if values else None, self._centre())

    def _cluster_finding(self, bad: Sequence[Measurement], total: int) -> Finding:
        parts = [f"{link_name(*m.pair)} {_mbps(m.value)}" for m in bad]
        values = [m.value for m in self._measured if m.value is not None]
        centre = statistics.median(values) if values else None
        return Finding("cluster", "cluster", self._level(bad), CHECK,
                       f"the whole set is slow/degraded: {len(bad)} of {total} pairs bad "
                       f"({', '.join(parts)}{self._floor_text(bad)}); no single host or "
                       f"link stands out", FIGURE, centre, self.th.floor_mbps)

    def _centre(self) -> float | None:
        return None if self._reference is None else self._reference[0]

    def _floor_text(self, ms: Sequence[Measurement]) -> str:
        if self.th.floor_mbps is None or not any(m.verdict == "floor" for m in ms):
            return ""
        return f"; floor {_mbps(self.th.floor_mbps)}"


def _mbps(value: float | None) -> str:
    if value is None:
        return "no data"
    return f"{value:,.0f} MB/s" if value >= 100 else f"{value:.3g} MB/s"


def _join(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


__all__ = ["Isolator", "Measurement", "PairThresholds", "ring_pairs", "ring_rounds"]
