"""A hang whose ranks disagree on the collective is a bug in the program, not in the cluster.

Every rank's NCCL watchdog names the collective it was stuck in: ``WorkNCCL(SeqNum=7219,
OpType=BROADCAST, NumelIn=64, ...)``. When ranks of one process group time out at the *same*
sequence number but report a different operation or a different element count, they called
different collectives (or one with different sizes): the code diverged between ranks (a
rank-dependent branch, a template bug, uneven data) and the job will hang again after a restart.
PyTorch's own collective fingerprinting (``TORCH_DISTRIBUTED_DEBUG=DETAIL``) reports the same as
"Detected mismatch between collectives on ranks".

    >>> collective_mismatch([]) is None
    True
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from trainguard.evidence.events import FailureEvent
from trainguard.taxonomy import Action, Category

MISMATCH_CONFIDENCE = 0.7


def collective_mismatch(events: Sequence[FailureEvent]) -> FailureEvent | None:
    """A user-code event standing for the watchdog reports that disagree, else ``None``.

    Reports are compared per (process group, sequence number); a report without a process
    group is compared with the others that name none.
    """
    by_call: dict[tuple[str, str], list[FailureEvent]] = defaultdict(list)
    for ev in events:
        seq = ev.field_value("seq")
        if ev.category is Category.NCCL_TIMEOUT_HANG and seq is not None \
                and ev.field_value("op") is not None:
            by_call[(ev.field_value("pg") or "", seq)].append(ev)
    for (pg, seq), reports in sorted(by_call.items()):
        shapes = {(e.field_value("op"), e.field_value("numel")) for e in reports}
        if len(shapes) < 2:
            continue
        first = min(reports, key=lambda e: (e.time is None, e.time or 0.0))
        seen = ", ".join(f"{op} of {numel or '?'} elements" for op, numel in sorted(
            shapes, key=lambda s: (s[0] or "", s[1] or "")))
        where = f"process group {pg} " if pg else ""
        return replace(
            first, category=Category.USER_CODE_ERROR, action=Action.FIX_CODE,
            signature="collective_mismatch", confidence=MISMATCH_CONFIDENCE,
            summary=(f"Ranks of {where}disagree on collective SeqNum={seq} ({seen}): "
                     "the code diverged between ranks")[:300],
            fields=(*first.fields, ("mismatch", seen[:500])))
    return None


__all__ = ["MISMATCH_CONFIDENCE", "collective_mismatch"]
