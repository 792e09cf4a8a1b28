"""Localize the host that breaks the ring-wide all-reduce, from smaller rings (pure: no I/O).

When the all-reduce over every host fails or times out, the controller runs the same check
over subsets of the hosts, round by round; the subsets of one round are disjoint, so they run
at once (one rank per host)::

    split = RingSplitter(hosts)                 # the whole ring failed
    while (subsets := split.next_round()) is not None:
        split.record({s: run_ring(s) for s in subsets})   # True: the subset completed
    findings = split.findings()

Outline:

1. Survey: the hosts in pairs (an odd host joins the last pair; with 3 hosts it waits for a
   known-good partner; with 2, each host runs alone, which at least shows one that cannot
   run the collective at all).
2. A host in a subset that completed is *cleared*. A failing subset whose members are all
   cleared but one singles that one out: it fails with hosts that complete without it. That is
   :func:`localize`, a function of the outcomes alone.
3. Each host not yet cleared nor singled out is paired with a cleared host it has not been
   with (one round settles a single faulty host); hosts left without a partner pair with each
   other. While nothing has completed, the hosts are re-paired, until each has failed with two
   partners; then it gives up. At most ``max_rounds`` rounds.
4. Whatever stays unexplained is said of the whole set ("cluster"): no subset completed, or
   the failure needs hosts that each complete elsewhere.

A failing pair of two cleared hosts is the link between them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainguard.check.model import Finding, Level, link_name
from trainguard.errors import ConfigError

Subset = tuple[str, ...]
CHECK = "allreduce"


@dataclass(frozen=True, slots=True)
class RingVerdict:
    """What the subsets' outcomes say about the failing ring."""

    culprits: tuple[str, ...]
    """Hosts that fail with hosts that complete without them."""
    links: tuple[tuple[str, str], ...]
    """Pairs that fail although each host completes with others."""
    unresolved: tuple[str, ...]
    """Hosts of the whole ring neither cleared nor singled out."""
    completed_any: bool
    """Some subset completed."""


def localize(hosts: Sequence[str], outcomes: Sequence[tuple[Subset, bool]]) -> RingVerdict:
    """The verdict on ``hosts`` (whose whole ring failed) from subsets' outcomes (subset,
    completed). A host is a culprit when a failing subset holds it and otherwise only hosts
    that completed in some subset."""
    cleared = {h for subset, ok in outcomes if ok for h in subset}
    culprits: list[str] = []
    links: list[tuple[str, str]] = []
    for subset, ok in outcomes:
        if ok:
            continue
        suspects = [h for h in subset if h not in cleared]
        if len(suspects) == 1 and suspects[0] not in culprits:
            culprits.append(suspects[0])
        elif not suspects and len(subset) == 2:
            pair = (min(subset), max(subset))
            if pair not in links:
                links.append(pair)
    unresolved = tuple(h for h in hosts if h not in cleared and h not in culprits)
    return RingVerdict(tuple(h for h in hosts if h in culprits), tuple(links), unresolved,
                       bool(cleared))


class RingSplitter:
    """Plans the subset rounds and judges them (see the module docstring)."""

    def __init__(self, hosts: Sequence[str], max_rounds: int = 3) -> None:
        if len(hosts) < 2 or len(set(hosts)) != len(hosts):
            raise ConfigError("ring split needs 2 or more distinct hosts")
        if max_rounds < 1:
            raise ConfigError("ring split max_rounds must be >= 1")
        self.hosts = tuple(hosts)
        self.max_rounds = max_rounds
        self.rounds = 0
        self.outcomes: list[tuple[Subset, bool]] = []

    def record(self, results: Mapping[Subset, bool]) -> None:
        """One round's outcomes: True where the subset's all-reduce completed."""
        self.outcomes += [(tuple(s), bool(ok)) for s, ok in results.items()]
        self.rounds += 1

    def verdict(self) -> RingVerdict:
        return localize(self.hosts, self.outcomes)

    def next_round(self) -> list[Subset] | None:
        """The next round's disjoint subsets, or None when done."""
        if self.rounds >= self.max_rounds:
            return None
        if self.rounds == 0:
            if len(self.hosts) == 2:
                return [(h,) for h in self.hosts]
            pairs = [self.hosts[i:i + 2] for i in range(0, len(self.hosts) - 1, 2)]
            if len(self.hosts) % 2 and len(pairs) >= 2:
                pairs[-1] += self.hosts[-1:]  # the odd host in a triple, not left untested
            return pairs
        verdict = self.verdict()
        if not verdict.unresolved:
            return None
        if not verdict.completed_any and all(
                sum(h in s for s, _ in self.outcomes) >= 2 for h in self.hosts):
            return None  # each host failed with two partners, nothing completes: the whole set
        tried = {frozenset(s) for s, _ in self.outcomes}
        cleared = [h for h in self.hosts
                   if h not in verdict.unresolved and h not in verdict.culprits]
        free = list(cleared)
        out: list[Subset] = []
        waiting: list[str] = []
        for h in verdict.unresolved:
            partner = next((p for p in free if frozenset((h, p)) not in tried), None)
            if partner is None:
                waiting.append(h)
                continue
            free.remove(partner)
            out.append((h, partner))
        while waiting:
            h = waiting.pop(0)
            partner = next((p for p in waiting if frozenset((h, p)) not in tried), None)
            if partner is not None:
                waiting.remove(partner)
                out.append((h, partner))
        return out or None

    def findings(self) -> list[Finding]:
        """FAIL per culprit host and per broken link, and one "cluster" FAIL for what no
        subset explains."""
        v = self.verdict()
        out = [Finding(h, "host", Level.FAIL, CHECK,
                       f"the all-reduce fails with {h} and completes without it ("
                       f"{self._evidence(h)})") for h in v.culprits]
        out += [Finding(link_name(a, b), "link", Level.FAIL, CHECK,
                        f"the all-reduce between {a} and {b} fails, although each completes "
                        "with other hosts") for a, b in v.links]
        if not v.completed_any:
            out.append(Finding("cluster", "cluster", Level.FAIL, CHECK,
                               f"no subset of the hosts completes the all-reduce either "
                               f"(tried {self._tried()})"))
        elif v.unresolved or not (v.culprits or v.links):
            what = (f"unresolved: {', '.join(v.unresolved)}" if v.unresolved
                    else "every host completes in a smaller ring")
            out.append(Finding("cluster", "cluster", Level.FAIL, CHECK,
                               f"the ring-wide all-reduce fails, and no single host explains "
                               f"it ({what}; tried {self._tried()})"))
        return out

    def _evidence(self, host: str) -> str:
        failed = [s for s, ok in self.outcomes if not ok and host in s]
        passed = sorted({p for s, ok in self.outcomes if ok for p in s})
        return (f"failed: {'; '.join(_name(s) for s in failed)}; completed without it: "
                f"{', '.join(passed)}")

    def _tried(self) -> str:
        return "; ".join(f"{_name(s)} {'ok' if ok else 'failed'}" for s, ok in self.outcomes)


def _name(subset: Subset) -> str:
    return "+".join(subset)


__all__ = ["CHECK", "RingSplitter", "RingVerdict", "Subset", "localize"]
