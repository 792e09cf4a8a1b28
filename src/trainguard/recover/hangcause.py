"""What a hung attempt is, and whom it blames (pure, but for :func:`job_files`).

Outline of :func:`hang_failure`:

1. a rank that trainguard stopped (``run --inject hang``, ``trainguard inject hang``) and that
   is still stopped is the cause: an ``injected_fault``, no node implicated (so is a culprit
   found below that sleeps in its steps by an injected ``slow`` fault);
2. with a collective picture (:mod:`trainguard.trace.hang`) naming culprits: a culprit running
   in the job's own code (its innermost Python frame is the job's, not a library's, not in a
   collective) is a hang in user code (``user_code_error``); otherwise a ``collective_hang``
   whose culprit's node is suspect, or at fault when its node has evidence (an XID, an alert);
3. without one: a stopped rank, else the rank behind the others, else the one whose progress
   stopped first is the likely culprit (its node suspect), else the job as a whole is hung
   (no rank, no node named).

A process stopped (SIGSTOP, state ``T``) by something other than trainguard was stopped from
outside the job (a debugger, an operator, a scheduler's suspend): it is named, its node is not
to blame. The category names no transport: the backend (``nccl``, ``gloo``, ``unknown``) is a
detail of the failure; ``nccl_timeout_hang`` stays what an NCCL watchdog line in a log says.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from trainguard.recover.failuremodel import (
    AttemptFacts,
    Failure,
    FailureKind,
    Implication,
    RankOutcome,
)
from trainguard.recover.injected import explains_slowdown, explains_stop
from trainguard.taxonomy import Category
from trainguard.trace.hang import HangDiagnosis, HangKind

OUTSIDE_STOP = ("something outside the job stopped it (a debugger, an operator, a scheduler's "
                "suspend), not its node")
_FAULTHANDLER_FRAME = re.compile(r'^File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>.+)$')
_PYSPY_FRAME = re.compile(r"^(?P<fn>\S+) \((?P<file>[^()]+):(?P<line>\d+)\)$")
_LIBRARY_PARTS = ("site-packages", "dist-packages")
_SDK_DIR = Path(__file__).resolve().parents[1]
"""trainguard's own package: its frames (the SDK's step, an injected slowdown) are never the
job's code, wherever it is installed."""


def backend_of(reported: str | None) -> str:
    """``nccl``, ``gloo``, another backend as reported, or ``unknown``."""
    name = (reported or "").strip().lower()
    return name if name else "unknown"


def hang_label(backend: str) -> str:
    """``collective hang (gloo)``; ``collective hang (backend unknown)``."""
    return "collective hang (backend unknown)" if backend == "unknown" \
        else f"collective hang ({backend})"


def frame_file(line: str) -> tuple[str, str] | None:
    """(file, ``name:line in fn``) of one stack line (faulthandler or py-spy), else None."""
    m = _FAULTHANDLER_FRAME.match(line.strip()) or _PYSPY_FRAME.match(line.strip())
    if m is None:
        return None
    return m["file"], f"{Path(m['file']).name}:{m['line']} in {m['fn']}"


def job_frame(stack_top: Sequence[str], is_job_file: Callable[[str], bool]) -> str | None:
    """The innermost frame of a stack (innermost first) when it is in the job's own code,
    e.g. ``train.py:12 in load_batch``; None when it is a library's (or unknown)."""
    for line in stack_top:
        found = frame_file(line)
        if found is not None:
            return found[1] if is_job_file(found[0]) else None
    return None


def job_files(command: Sequence[str], cwd: Path) -> Callable[[str], bool]:
    """Whether a stack's file is the job's own: under the directory of a ``.py`` script of
    ``command``, and neither an installed package nor trainguard's. A relative name (py-spy
    shortens paths to their ``sys.path`` entry) counts when it exists under such a
    directory."""
    roots = []
    for arg in command:
        if arg.endswith(".py"):
            path = Path(arg) if os.path.isabs(arg) else cwd / arg
            if path.is_file():
                roots.append(path.resolve().parent)

    def check(name: str) -> bool:
        path = Path(name)
        if not roots or any(part in _LIBRARY_PARTS for part in path.parts):
            return False
        if path.is_absolute():
            return not path.is_relative_to(_SDK_DIR) \
                and any(path.is_relative_to(root) for root in roots)
        return path.parts[:1] != (_SDK_DIR.name,) and any((root / path).is_file()
                                                           for root in roots)

    return check


def own_code(diag: HangDiagnosis | None, command: Sequence[str], workdir: Path) -> dict[int, str]:
    """For a localized hang: the culprits whose innermost frame is the job's own code, with
    that frame (for :attr:`AttemptFacts.own_code`)."""
    if diag is None or not diag.culprits:
        return {}
    is_job_file = job_files(command, workdir)
    frames = {c.rank: job_frame(c.stack_top, is_job_file) for c in diag.culprits}
    return {rank: frame for rank, frame in frames.items() if frame}


def hang_failure(facts: AttemptFacts) -> Failure:
    """The failure of a hung attempt (see the module outline)."""
    backend = backend_of(facts.backend)
    waited = f" for {facts.hang_for_s:.0f} s" if facts.hang_for_s is not None else ""
    diag = facts.hang
    injected = _injected_stop(facts, waited, backend)
    if injected is not None:
        return injected
    if diag is not None and diag.culprits:
        found = _localized(facts, diag, waited, backend)
    else:
        found = _fallback(facts, diag, waited, backend)
    slow = None if found.culprit_rank is None else \
        explains_slowdown(facts.injections, found.culprit_rank)
    if slow is None:
        return found
    # The culprit sleeps in every step because trainguard told it to (--inject slow).
    what = slow.describe()
    return replace(found, category=Category.INJECTED_FAULT, summary=f"{found.summary}; the "
                   f"cause: {what}", injected=what, cause=what, blame=Implication.NONE)


def _injected_stop(facts: AttemptFacts, waited: str, backend: str) -> Failure | None:
    stopped = [o for o in facts.outcomes if o.returncode is None and o.stopped]
    if facts.hang is not None:
        seen = {o.rank for o in stopped}
        stopped += [RankOutcome(c.rank, c.node, None, stopped=True)
                    for c in facts.hang.culprits
                    if c.process == "stopped" and c.rank not in seen]
    for o in stopped:
        inj = explains_stop(facts.injections, o.rank)
        if inj is not None:
            what = inj.describe()
            return Failure(FailureKind.HANG, Category.INJECTED_FAULT,
                           f"hang: no progress{waited}; {what} on {o.node}: its process is "
                           "stopped (SIGSTOP) and the others wait for it"
                           + (f"; {facts.hang.summary}" if facts.hang is not None else ""),
                           culprit_nodes=(o.node,), culprit_rank=o.rank, injected=what,
                           backend=backend, blame=Implication.NONE, cause=what)
    return None


def _localized(facts: AttemptFacts, diag: HangDiagnosis, waited: str, backend: str) -> Failure:
    root = diag.culprits[0]
    evidence = [f"rank {c.rank} on {c.node}: {c.reason}" for c in diag.culprits[:4]]
    evidence += [f"rank {root.rank} stack: {line}" for line in root.stack_top]
    evidence += [f"{root.node}: {line}" for line in root.node_evidence[:4]]
    frame = facts.own_code.get(root.rank)
    if frame and root.process == "running" and diag.kind in (
            HangKind.MISSING, HangKind.OUTSIDE, HangKind.UNKNOWN):
        cause = f"hang in the job's own code at {frame}"
        return Failure(FailureKind.HANG, Category.USER_CODE_ERROR,
                       f"hang: no progress{waited}; rank {root.rank} on {root.node} is stuck in "
                       f"the job's own code ({frame}), outside any collective; {diag.summary}",
                       culprit_nodes=(root.node,), culprit_rank=root.rank,
                       evidence=tuple(evidence), backend=backend, cause=cause)
    # The collective picture names the host; evidence on it (an XID, an alert) makes it the
    # node's fault, otherwise the node is suspect and a repeat excludes it.
    node_fault = diag.definitive and bool(root.node_evidence)
    summary = f"{hang_label(backend)}: no progress{waited}; {diag.summary}"
    blame = None
    if root.process == "stopped" and not node_fault:
        summary += f"; rank {root.rank} is stopped (SIGSTOP): {OUTSIDE_STOP}"
        blame = Implication.NONE
    return Failure(FailureKind.HANG, Category.COLLECTIVE_HANG, summary,
                   culprit_nodes=diag.culprit_nodes, culprit_rank=root.rank,
                   node_fault=node_fault, evidence=tuple(evidence), backend=backend,
                   blame=blame)


def _fallback(facts: AttemptFacts, diag: HangDiagnosis | None, waited: str,
              backend: str) -> Failure:
    head = f"{hang_label(backend)}: no progress{waited}"
    tail = f"; {diag.summary}" if diag is not None else ""
    running = [o for o in facts.outcomes if o.returncode is None] or list(facts.outcomes)
    stopped = [o for o in running if o.stopped]
    if stopped:
        c = stopped[0]
        return Failure(FailureKind.HANG, Category.COLLECTIVE_HANG,
                       f"{head}; rank {c.rank} on {c.node} is stopped (SIGSTOP) and the others "
                       f"wait for it: {OUTSIDE_STOP}{tail}", culprit_nodes=(c.node,),
                       culprit_rank=c.rank, backend=backend, blame=Implication.NONE)
    stepped = [o for o in running if o.last_step is not None]
    if stepped and len({o.last_step for o in stepped}) > 1:
        culprit = min(stepped, key=lambda o: (o.last_step, o.rank))
        why = f"it is behind the others at step {culprit.last_step}"
    else:
        timed = [o for o in running if o.last_progress is not None]
        if not timed:
            # No rank reports its own progress (no SDK): nothing singles one out.
            return Failure(FailureKind.HANG, Category.COLLECTIVE_HANG,
                           f"{head}; the job as a whole is hung (no rank is singled out by the "
                           f"evidence){tail}", backend=backend)
        culprit = min(timed, key=lambda o: (o.last_progress or 0.0, o.rank))
        why = "its progress stopped first"
    return Failure(FailureKind.HANG, Category.COLLECTIVE_HANG,
                   f"{head}; rank {culprit.rank} on {culprit.node} is the likely culprit "
                   f"({why}){tail}", culprit_nodes=(culprit.node,), culprit_rank=culprit.rank,
                   backend=backend)


__all__ = ["OUTSIDE_STOP", "backend_of", "frame_file", "hang_failure", "hang_label", "job_files",
           "job_frame", "own_code"]
