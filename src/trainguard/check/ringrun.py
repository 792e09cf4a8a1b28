"""Running the ring split (:mod:`trainguard.check.ringsplit`) through the hosts' agents.

Each round's subsets are disjoint, so a round is ONE attempt of the agents: every subset is a
ring of its own (its own ``MASTER_ADDR``/``MASTER_PORT``, ranks numbered from 0), all started
together and all stopped at the round's time limit. A subset completed when every one of its
ranks exited 0 and its rank 0 printed the result line.

    findings = split_ring(backend, hosts, work_dir, master_for, python, timeout_s=30.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from trainguard.check.agents import LaunchesAgents, ring_plan
from trainguard.check.allreduce import parse_result
from trainguard.check.checker import CheckReport
from trainguard.check.judge import summarize
from trainguard.check.model import Finding
from trainguard.check.ringsplit import RingSplitter, Subset
from trainguard.recover.launchplan import LaunchPlan, RankLaunch

SUBSET_MBYTES = 1.0
"""The subsets' all-reduce size: they show whether it completes, not the bandwidth."""
RING_TIMEOUT_S = 60.0
"""The default limit of the ring-wide all-reduce over every host that passed (the agents'
connect timeout when that is longer)."""
SUBSET_TIMEOUT_S = 45.0
"""The default limit of one round (agents, torch start-up, rendezvous, the all-reduce): a
healthy round of two pairs took 9-13 s on the 2-core test machine under a load of 10."""

MasterFor = Callable[[Subset], tuple[str, int]]
"""The rendezvous address and port of a subset's rank 0."""


def round_plan(subsets: Sequence[Subset], work_dir: Path, master_for: MasterFor,
               python: str, mbytes: float = SUBSET_MBYTES
               ) -> tuple[LaunchPlan, dict[Subset, tuple[int, ...]]]:
    """One attempt running each of the disjoint ``subsets`` as a ring of its own; and each
    subset's ranks in that attempt (its rank 0 first)."""
    plans = [ring_plan(s, work_dir, master_for(s), python, mbytes) for s in subsets]
    ranks: list[RankLaunch] = []
    members: dict[Subset, tuple[int, ...]] = {}
    for subset, plan in zip(subsets, plans, strict=True):
        first = len(ranks)
        # numbered across the attempt; RANK and WORLD_SIZE in the env stay the subset's own
        ranks += [replace(r, rank=first + i, node_rank=first + i,
                          output=work_dir / r.node / f"ring{first + i}.log")
                  for i, r in enumerate(plan.ranks)]
        members[subset] = tuple(range(first, len(ranks)))
    nodes = tuple(h for s in subsets for h in s)
    return replace(plans[0], nodes=nodes, ranks=tuple(ranks)), members


def run_round(backend: LaunchesAgents, plan: LaunchPlan,
              members: Mapping[Subset, tuple[int, ...]], timeout_s: float,
              clock: Callable[[], float] = time.time,
              sleep: Callable[[float], None] = time.sleep) -> dict[Subset, bool]:
    """Launch ``plan``, wait for its ranks (stopped at ``timeout_s``): which subsets
    completed."""
    attempt = backend.launch(plan)
    codes: dict[int, int] = {}
    try:
        deadline = clock() + timeout_s
        while attempt.running() and clock() < deadline:
            codes.update({ex.rank: ex.returncode for ex in attempt.poll()})
            sleep(0.05)
        codes.update({ex.rank: ex.returncode for ex in attempt.poll()})
        if attempt.running():
            attempt.stop(2.0)  # the subsets that hang: their ranks are not done, not 0
    finally:
        attempt.close()
    out = {}
    for subset, ranks in members.items():
        exited = all(codes.get(r) == 0 for r in ranks)
        out[subset] = exited and _has_result(plan.ranks[ranks[0]].output)
    return out


def _has_result(path: Path) -> bool:
    try:
        return parse_result(path.read_text(errors="replace")) is not None
    except OSError:
        return False


def distinct_masters(addr_for: Callable[[tuple[str, ...]], str],
                     port_for: Callable[[tuple[str, ...]], int]) -> MasterFor:
    """A :data:`MasterFor` from the backend's ``master_addr`` and ``free_port`` that never
    hands out one address and port twice (virtual hosts share one loopback)."""
    used: set[tuple[str, int]] = set()

    def master(subset: Subset) -> tuple[str, int]:
        addr = addr_for(subset)
        for _ in range(32):
            port = port_for(subset)
            if (addr, port) not in used:
                break
        used.add((addr, port))
        return addr, port

    return master


def with_split(failed: Finding, split: Sequence[Finding]) -> list[Finding]:
    """The ring's findings once split: the hosts (or links) the subsets single out, each
    with the whole ring's failure in its reason; the whole-set finding only where the split
    leaves something unexplained (its reason then says what the subsets showed)."""
    named = [replace(f, reason=f"{failed.reason}; {f.reason}") for f in split
             if f.kind != "cluster"]
    rest = [replace(failed, reason=f"{failed.reason}; {f.reason}") for f in split
            if f.kind == "cluster"]
    return [*named, *rest] if split else [failed]


def with_ring(report: CheckReport, findings: Sequence[Finding], seconds: float) -> CheckReport:
    """``report`` with the ring's ``findings`` added, their hosts' verdicts updated."""
    every = (*report.findings, *findings)
    worst = summarize(every)
    verdicts = {h: worst.get(h, level) for h, level in report.verdicts.items()}
    return replace(report, findings=every, verdicts=verdicts,
                   duration_s=report.duration_s + seconds)


def split_ring(backend: LaunchesAgents, hosts: Sequence[str], work_dir: Path,
               master_for: MasterFor, python: str, *,
               timeout_s: float = SUBSET_TIMEOUT_S, max_rounds: int = 3,
               status: Callable[[str], None] = lambda _: None,
               clock: Callable[[], float] = time.time,
               sleep: Callable[[float], None] = time.sleep) -> list[Finding]:
    """After the ring over ``hosts`` failed: the subset rounds, and what they single out."""
    split = RingSplitter(hosts, max_rounds=max_rounds)
    while (subsets := split.next_round()) is not None:
        status(f"all-reduce over subsets, round {split.rounds + 1}: "
               + ", ".join("+".join(s) for s in subsets))
        plan, members = round_plan(subsets, work_dir / f"split{split.rounds + 1}", master_for,
                                   python)
        split.record(run_round(backend, plan, members, timeout_s, clock, sleep))
    return split.findings()


__all__ = ["RING_TIMEOUT_S", "SUBSET_MBYTES", "SUBSET_TIMEOUT_S", "MasterFor", "distinct_masters",
           "round_plan", "run_round", "split_ring", "with_ring", "with_split"]
