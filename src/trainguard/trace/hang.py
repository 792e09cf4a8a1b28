"""Which rank, host and collective a hang comes from (pure).

Outline of :func:`localize_hang`:

1. per process group, the ranks *inside* a collective (entered its seq, not completed) wait in
   the highest such seq N; its op is what they wait in;
2. members of that group that never entered N (their last entered seq is below N) are the
   culprits; a culprit that is itself waiting in another group's collective passes the blame on
   to whoever is missing there (followed until it stops, at most a few hops);
3. if every member entered N and none completed it, the collective itself is stuck (the
   transport, or a rank that died inside it); if the members waiting in N called different
   ops, the ranks diverged (a desync: different code paths);
4. if no rank is inside any collective, the hang is outside communication: a stopped or dead
   process is named, else the rank with the lowest step;
5. each culprit is mapped to its host, local rank / GPU and process state, with its last
   completed collective, its step and span, the innermost frames of its Python stack, and the
   evidence its node has (XIDs, detector alerts).

A process the supervisor sees stopped (SIGSTOP, state ``T``) or dead overrides nothing in the
collective picture but is stated as the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from trainguard.trace.model import WORLD, GroupState, RankState

_MAX_HOPS = 4
_BENIGN = ("running", "unknown", "finished")
"""Process states that say nothing against a rank (``finished``: exited 0)."""
_STACK_LINES = 6


def _down(places: Mapping[int, RankPlace], rank: int) -> bool:
    """The rank's process is stopped, in D state, a zombie or exited non-zero."""
    place = places.get(rank)
    return place is not None and place.process not in _BENIGN


class HangKind(StrEnum):
    MISSING = "missing_ranks"
    """Some ranks never entered the collective the others wait in."""
    STUCK = "stuck_collective"
    """Every member entered it; it does not complete (transport, or a rank died inside)."""
    MISMATCH = "mismatched_collectives"
    """Members wait in the same sequence number with different ops (a desync)."""
    OUTSIDE = "outside_collectives"
    """Nobody waits in a collective: the hang is in computation, data loading or I/O."""
    UNKNOWN = "unknown"
    """No rank reported any collective state."""


@dataclass(frozen=True, slots=True)
class RankPlace:
    """Where a rank runs and what its process looks like to the supervisor."""

    rank: int
    node: str
    local_rank: int | None = None
    gpu: str | None = None
    """The GPU it uses (its index, or UUID from CUDA_VISIBLE_DEVICES), when known."""
    pid: int | None = None
    process: str = "running"
    """``running``, ``stopped`` (SIGSTOP), ``disk-sleep`` (D state), ``exited`` (non-zero or by
    a signal), ``finished`` (exited 0), ``zombie``, or ``unknown`` (a post-mortem: the
    processes are gone)."""
    stack: str | None = None
    """Its Python stacks (faulthandler or py-spy text), when one was taken."""


@dataclass(frozen=True, slots=True)
class Culprit:
    rank: int
    node: str
    local_rank: int | None
    gpu: str | None
    pid: int | None
    process: str
    reason: str
    """Why this rank: ``never entered all_gather #915 (group world)`` ..."""
    last_completed: str | None
    """``barrier #914`` in the group at issue."""
    step: int | None
    span: str | None
    stack_top: tuple[str, ...] = ()
    node_evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "local_rank": self.local_rank,
                "gpu": self.gpu, "pid": self.pid, "process": self.process,
                "reason": self.reason, "last_completed": self.last_completed,
                "step": self.step, "span": self.span, "stack_top": list(self.stack_top),
                "node_evidence": list(self.node_evidence)}


@dataclass(frozen=True, slots=True)
class HangDiagnosis:
    kind: HangKind
    summary: str
    group: str | None = None
    op: str | None = None
    seq: int | None = None
    waiting: tuple[int, ...] = ()
    """Ranks inside the collective at issue."""
    culprits: tuple[Culprit, ...] = ()
    notes: tuple[str, ...] = ()
    sources: Mapping[int, str] = field(default_factory=dict)
    """Per rank, where its state came from (``trainguard``, ``flight-recorder``, ``none``)."""

    @property
    def culprit_nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.node for c in self.culprits))

    @property
    def definitive(self) -> bool:
        """The culprits are certain: ranks that never entered the collective the others wait
        in, or a stopped/dead rank inside the one every rank entered."""
        if self.kind is HangKind.MISSING:
            return bool(self.culprits)
        return self.kind is HangKind.STUCK and any(
            c.process not in _BENIGN for c in self.culprits)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "summary": self.summary, "group": self.group,
                "op": self.op, "seq": self.seq, "waiting": list(self.waiting),
                "culprits": [c.to_dict() for c in self.culprits], "notes": list(self.notes),
                "culprit_nodes": list(self.culprit_nodes),
                "sources": {str(k): v for k, v in sorted(self.sources.items())}}


def stack_top(text: str | None, lines: int = _STACK_LINES) -> tuple[str, ...]:
    """The innermost frames of the training thread in a faulthandler or py-spy dump.

    faulthandler prints ``Thread 0x... (most recent call first):`` then ``  File "x", line N
    in f`` lines; py-spy prints ``Thread 123 (idle): "MainThread"`` then ``    f (x:N)``. The
    thread whose outermost frame is ``<module>`` is the training loop; else the first thread.
    """
    if not text:
        return ()
    threads: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(("Thread ", "Current thread ")):
            threads.append([])
        elif threads and (line.startswith("File ") or "(" in line):
            threads[-1].append(line)
    threads = [t for t in threads if t]
    if not threads:
        return ()
    main = next((t for t in reversed(threads) if "<module>" in t[-1]), threads[0])
    return tuple(main[:lines])


def _last_completed(g: GroupState | None) -> str | None:
    if g is None or g.completed_seq == 0:
        return None
    if g.last is not None and g.last.seq == g.completed_seq:
        return f"{g.last.op} #{g.completed_seq}"
    return f"#{g.completed_seq}"


def _inside(states: Mapping[int, RankState]) -> dict[str, dict[int, GroupState]]:
    out: dict[str, dict[int, GroupState]] = {}
    for rank, st in states.items():
        for name, g in st.groups.items():
            if g.inside:
                out.setdefault(name, {})[rank] = g
    return out


def _members(group: str, states: Mapping[int, RankState], world: Sequence[int]) -> list[int]:
    if group == WORLD:
        return list(world)
    return sorted(r for r, st in states.items() if group in st.groups)


def _missing(group: str, seq: int, states: Mapping[int, RankState],
             world: Sequence[int]) -> list[int]:
    out = []
    for r in _members(group, states, world):
        st = states.get(r)
        g = st.groups.get(group) if st is not None else None
        if g is None or g.entered_seq < seq:
            out.append(r)
    return out


def _pick_group(inside: Mapping[str, Mapping[int, GroupState]], states: Mapping[int, RankState],
                world: Sequence[int]) -> tuple[str, int] | None:
    """The group and seq to explain: one with missing members first (world first), else the
    one with the most ranks waiting."""
    best: tuple[tuple[int, int, int], str, int] | None = None
    for name, ranks in inside.items():
        seq = max(g.entered_seq for g in ranks.values())
        missing = _missing(name, seq, states, world)
        key = (1 if missing else 0, len(ranks), 1 if name == WORLD else 0)
        if best is None or key > best[0]:
            best = (key, name, seq)
    return None if best is None else (best[1], best[2])


def _culprit(rank: int, reason: str, group: str | None, states: Mapping[int, RankState],
             places: Mapping[int, RankPlace], evidence: Mapping[str, Sequence[str]]) -> Culprit:
    st = states.get(rank)
    place = places.get(rank, RankPlace(rank, "?"))
    g = st.groups.get(group) if st is not None and group is not None else None
    proc = place.process
    if proc not in _BENIGN:
        reason += {"stopped": "; its process is stopped (SIGSTOP)",
                   "disk-sleep": "; its process is in uninterruptible sleep (D: I/O or driver)",
                   "exited": "; its process has exited", "zombie": "; its process is a zombie",
                   }.get(proc, f"; process state {proc}")
    return Culprit(rank=rank, node=place.node, local_rank=place.local_rank, gpu=place.gpu,
                   pid=place.pid if place.pid is not None else (st.pid if st else None),
                   process=proc, reason=reason, last_completed=_last_completed(g),
                   step=st.step if st else None, span=st.span if st else None,
                   stack_top=stack_top(place.stack),
                   node_evidence=tuple(evidence.get(place.node, ())))


def _waiting_in(st: RankState | None) -> tuple[str, GroupState] | None:
    """The group collective a rank is inside, if any."""
    if st is None:
        return None
    for name, g in sorted(st.groups.items()):
        if g.inside:
            return name, g
    return None


def _call(name: str, g: GroupState) -> str:
    op = g.last.op if g.last is not None else "collective"
    return f"{op} #{g.entered_seq} (group {name})"


def _blame(missing: Sequence[int], waiting: set[int], group: str, where: str,
           states: Mapping[int, RankState], places: Mapping[int, RankPlace],
           evidence: Mapping[str, Sequence[str]], world: Sequence[int]) -> list[Culprit]:
    """Root causes first: missing ranks that are not inside any collective (computing,
    sleeping, stopped); then missing ranks that wait in an earlier or another collective, whose
    own missing members are followed (a few hops) when no root is found directly."""
    roots: list[Culprit] = []
    victims: list[Culprit] = []
    seen = set(missing) | waiting
    frontier: list[int] = []
    for r in missing:
        inside = _waiting_in(states.get(r))
        dead = _down(places, r)
        if inside is not None and dead:  # stopped inside an earlier call: it is the root
            roots.append(_culprit(r, f"never entered {where}: it was stopped inside "
                                  f"{_call(*inside)}", group, states, places, evidence))
        elif inside is None:
            g = states[r].groups.get(group) if r in states else None
            text = f"never entered {where}"
            if g is None or g.entered_seq == 0:
                text += " (no collective in this group yet)"
            roots.append(_culprit(r, text, group, states, places, evidence))
        else:
            victims.append(_culprit(r, f"never entered {where}: it waits in "
                                    f"{_call(*inside)}", group, states, places, evidence))
            frontier.append(r)
    hops = 0
    while not roots and frontier and hops < _MAX_HOPS:
        hops += 1
        nxt: list[int] = []
        for r in frontier:
            inside = _waiting_in(states.get(r))
            if inside is None:
                continue
            name, g = inside
            for m in _missing(name, g.entered_seq, states, world):
                if m in seen:
                    continue
                seen.add(m)
                deeper = _waiting_in(states.get(m))
                text = f"never entered {_call(name, g)}, which rank {r} waits in"
                if deeper is None:
                    roots.append(_culprit(m, text, name, states, places, evidence))
                else:
                    victims.append(_culprit(m, f"{text}: it waits in {_call(*deeper)}", name,
                                            states, places, evidence))
                    nxt.append(m)
        frontier = nxt
    return roots + victims


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else \
        f"{', '.join(map(str, ranks[:8]))} and {len(ranks) - 8} more"


def localize_hang(
    states: Mapping[int, RankState | None],
    places: Mapping[int, RankPlace],
    node_evidence: Mapping[str, Sequence[str]] | None = None,
    world: Sequence[int] | None = None,
    notes: Sequence[str] = (),
) -> HangDiagnosis:
    """Name the rank(s), host(s) and collective behind a hang (see the module outline).

    `states`: each rank's last known collective state (None: unreadable); `places`: where each
    rank runs; `world`: every rank of the job (default: the keys of both); `notes`: what
    reading the states said (kept, after the diagnosis' own notes).
    """
    evidence = node_evidence or {}
    known = {r: s for r, s in states.items() if s is not None}
    all_ranks = sorted(set(world) if world is not None else set(states) | set(places))
    sources = {r: (known[r].source if r in known else "none") for r in all_ranks}
    blind = [r for r in all_ranks if r not in known]
    own = [f"no collective state from rank(s) {_ranks(blind)}"] if blind else []
    notes = [*own, *notes]
    if not known:
        return _from_stacks(all_ranks, places, evidence, notes, sources)
    inside = _inside(known)
    picked = _pick_group(inside, known, all_ranks)
    if picked is None:
        return _outside(known, places, evidence, all_ranks, notes, sources)
    group, seq = picked
    waiting = sorted(r for r, g in inside[group].items() if g.entered_seq == seq)
    called = {r: (g.last.op if g.last is not None else "?")
              for r, g in inside[group].items() if r in waiting}
    ops = set(called.values())
    op = next(iter(ops)) if len(ops) == 1 else "/".join(sorted(ops))
    where = f"{op} #{seq} (group {group})"
    missing = _missing(group, seq, known, all_ranks)
    if missing:
        culprits = _blame(missing, set(waiting), group, where, known, places, evidence,
                          all_ranks)
        root = culprits[0]
        summary = f"rank {root.rank} on {root.node} {root.reason}"
        if root.last_completed:
            summary += f"; it last completed {root.last_completed}"
        if root.step is not None:
            summary += f" at step {root.step}"
        if root.span:
            summary += f" (in {root.span})"
        summary += f"; rank(s) {_ranks(waiting)} wait in {where}"
        others = [c for c in culprits[1:]]
        if others:
            summary += "; also behind: " + "; ".join(
                f"rank {c.rank} ({c.reason})" for c in others[:3])
            if len(others) > 3:
                summary += f" and {len(others) - 3} more"
        return HangDiagnosis(HangKind.MISSING, summary, group, op, seq, tuple(waiting),
                             tuple(culprits), tuple(notes), sources)
    if len(ops) > 1:
        by_op: dict[str, list[int]] = {}
        for r in waiting:
            by_op.setdefault(called[r], []).append(r)
        minority = min(by_op.values(), key=lambda rs: (len(rs), rs))
        diverged = [_culprit(r, f"called a different collective at #{seq} (group {group}): "
                             f"{called[r]}", group, known, places, evidence) for r in minority]
        parts = "; ".join(f"{o}: rank(s) {_ranks(rs)}" for o, rs in sorted(by_op.items()))
        return HangDiagnosis(HangKind.MISMATCH, f"ranks called different collectives at #{seq} "
                             f"of group {group} ({parts}): their code paths diverged", group, op,
                             seq, tuple(waiting), tuple(diverged), tuple(notes), sources)
    dead = [r for r in waiting
            if _down(places, r)]
    inside_too = [_culprit(r, f"is inside {where} with the others", group, known, places,
                           evidence) for r in dead]
    summary = (f"every rank of group {group} entered {where} and it does not complete: the "
               f"transport is stuck or a rank failed inside it")
    if inside_too:
        first = inside_too[0]
        summary = (f"rank {first.rank} on {first.node}: {first.reason.split('; ', 1)[-1]}, "
                   f"inside {where}, which every rank of group {group} entered and which "
                   f"cannot complete without it")
    flagged = [n for n in dict.fromkeys(places[r].node for r in waiting if r in places)
               if evidence.get(n)]
    if flagged and not inside_too:
        inside_too = [_culprit(r, f"is inside {where}; its node has evidence", group, known,
                               places, evidence) for r in waiting
                      if r in places and places[r].node in flagged]
        summary += f"; node(s) with evidence: {', '.join(flagged)}"
    return HangDiagnosis(HangKind.STUCK, summary, group, op, seq, tuple(waiting),
                         tuple(inside_too), tuple(notes), sources)


_COLLECTIVE_FRAME = re.compile(
    r"\b(all_reduce|all_gather(?:_into_tensor|_object)?|reduce_scatter(?:_tensor)?|broadcast"
    r"(?:_object_list)?|_broadcast_coalesced|barrier|monitored_barrier|all_to_all(?:_single)?"
    r"|gather(?:_object)?|scatter(?:_object_list)?|reduce|send|recv)\b.*distributed_c10d\.py"
    r"|distributed_c10d\.py.*\bin (all_reduce|all_gather(?:_into_tensor|_object)?"
    r"|reduce_scatter(?:_tensor)?|broadcast(?:_object_list)?|barrier|monitored_barrier"
    r"|all_to_all(?:_single)?|gather(?:_object)?|scatter(?:_object_list)?|reduce|send|recv)\b")


_IDLE_MAIN = re.compile(r"^Thread \S+ \(idle[^)]*\): \"MainThread\"", re.MULTILINE)


def stack_collective(text: str | None) -> str | None:
    """The torch.distributed collective the training thread of a stack dump is in (py-spy or
    faulthandler format), None when it is in none (or there is no stack).

    DDP reduces gradients inside ``backward()``: a main thread that py-spy sees *idle* (off
    the CPU) with autograd's engine as its innermost frame waits in that all-reduce."""
    top = stack_top(text, lines=40)
    for line in top:
        m = _COLLECTIVE_FRAME.search(line)
        if m:
            return (m.group(1) or m.group(2)).lstrip("_")
    if top and top[0].startswith("_engine_run_backward ") and text is not None \
            and _IDLE_MAIN.search(text):
        return "all_reduce"
    return None


def _from_stacks(world: Sequence[int], places: Mapping[int, RankPlace],
                 evidence: Mapping[str, Sequence[str]], notes: list[str],
                 sources: Mapping[int, str]) -> HangDiagnosis:
    """No rank reported collective state (no SDK, or tracing off): stopped or dead ranks, else
    what their Python stacks (py-spy) say: ranks outside any collective while the others wait
    in one are the culprits (no sequence numbers: stacks do not carry them)."""
    none: dict[int, RankState] = {}
    stopped = [r for r in world if _down(places, r)]
    if stopped:
        lost = tuple(_culprit(r, "no collective state", None, none, places, evidence)
                     for r in stopped)
        summary = (f"no rank reported collective state (tracing off, or no SDK); not running: "
                   f"{lost[0].reason.split('; ', 1)[-1]} (rank {lost[0].rank} on "
                   f"{lost[0].node})")
        return HangDiagnosis(HangKind.UNKNOWN, summary, culprits=lost, notes=tuple(notes),
                             sources=sources)
    stacks = {r: places[r].stack for r in world if r in places and places[r].stack}
    ops = {r: stack_collective(t) for r, t in stacks.items()}
    waiting = sorted(r for r, op in ops.items() if op is not None)
    outside = sorted(r for r, op in ops.items() if op is None)
    if waiting and outside:
        op_names = sorted({ops[r] or "" for r in waiting})
        op = "/".join(op_names)
        culprits = tuple(_culprit(r, f"is not in a collective while rank(s) {_ranks(waiting)} "
                                  f"wait in {op} (from their stacks)", None, none, places,
                                  evidence) for r in outside)
        return HangDiagnosis(
            HangKind.MISSING, f"rank {culprits[0].rank} on {culprits[0].node} "
            f"{culprits[0].reason}; no collective state (tracing off, or no SDK): no sequence "
            f"numbers", op=op, waiting=tuple(waiting), culprits=culprits,
            notes=(*notes, "localized from Python stacks (py-spy)"), sources=sources)
    summary = "no rank reported collective state (tracing off, or no SDK)"
    if stacks and not outside:
        summary += f"; every rank with a stack waits in a collective ({_ranks(waiting)})"
    return HangDiagnosis(HangKind.UNKNOWN, summary, notes=tuple(notes), sources=sources)


def _outside(states: Mapping[int, RankState], places: Mapping[int, RankPlace],
             evidence: Mapping[str, Sequence[str]], world: Sequence[int], notes: list[str],
             sources: Mapping[int, str]) -> HangDiagnosis:
    not_running = [r for r in world
                   if _down(places, r)]
    if not_running:
        culprits = [_culprit(r, "is not in a collective", None, states, places, evidence)
                    for r in not_running]
        why = "not running"
    else:
        steps = {r: s.step for r, s in states.items() if s.step is not None}
        if steps and len(set(steps.values())) > 1:
            low = min(steps.values())
            behind = sorted(r for r, s in steps.items() if s == low)
            culprits = [_culprit(r, f"is behind at step {low}", None, states, places, evidence)
                        for r in behind]
            why = f"behind at step {low}"
        else:
            culprits = []
            why = ""
    spans = sorted({s.span for s in states.values() if s.span})
    summary = "no rank is waiting in a collective: the hang is in computation, data loading " \
              "or I/O"
    if spans:
        summary += f" (ranks are in: {', '.join(spans)})"
    if culprits:
        summary += f"; rank {culprits[0].rank} on {culprits[0].node} is {why}"
    return HangDiagnosis(HangKind.OUTSIDE, summary, culprits=tuple(culprits), notes=tuple(notes),
                         sources=sources)


__all__ = ["Culprit", "HangDiagnosis", "HangKind", "RankPlace", "localize_hang",
           "stack_collective", "stack_top"]
