"""Turn one candidate log line (plus context) into a :class:`FailureEvent`.

Order of evidence for one line:
1. NVRM Xid / NVSwitch SXid / fallen-off-the-bus reports (catalog-driven, ``xid.py``);
2. the signature rules in precedence order (``rules.py``);
3. when asked for, failure words no rule explains (``suspicion.py``): an informational
   ``failure_words`` event of category ``unknown`` with a low confidence;
4. nothing: the prefilter's keyword was a false alarm.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.evidence.cuda_errors import RULE_ID as CUDA_RULE_ID
from trainguard.evidence.cuda_errors import identify as identify_cuda_error
from trainguard.evidence.cuda_errors import reading as cuda_reading
from trainguard.evidence.events import STORED_CHARS, EvidenceLine, FailureEvent, TimeKind
from trainguard.evidence.lineparse import LinePrefix
from trainguard.evidence.rules import RuleMatch, RuleSet, render_summary
from trainguard.evidence.signals import (
    SIGNAL_FIELD,
    signal_cause,
    signal_number,
    signal_of_status,
)
from trainguard.evidence.suspicion import SIGNATURE as SUSPICION_SIGNATURE
from trainguard.evidence.suspicion import suspicion
from trainguard.evidence.xid import (
    APP_FAULT_XIDS,
    CONSEQUENCE_XIDS,
    FALLEN_OFF_START,
    XidMatch,
    normalize_pci,
    parse_xid_line,
    recovery_action_to_action,
    xid_info,
)
from trainguard.taxonomy import SEVERITY_RANK, Action, Category, Severity

_SELF_GRADED_XIDS = frozenset(range(144, 151))
_NONFATAL_WORD = re.compile(r"\bNon-?fatal\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class LineContext:
    """Where a line came from and what its prefix said."""

    path: str
    line_no: int
    prefix: LinePrefix
    host_hint: str | None = None
    raw: str | None = None
    """The line as read, when the classifier reads a cleaned copy (``unwrap.unwrap_line``):
    evidence keeps the line as it was."""

    def evidence(self, text: str) -> EvidenceLine:
        """This line as evidence: as read, or ``text`` when it was read as is."""
        shown = self.raw if self.raw is not None else text
        return EvidenceLine(self.path, self.line_no, shown[:STORED_CHARS])


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _base_kwargs(ctx: LineContext, text: str) -> dict[str, object]:
    p = ctx.prefix
    return {
        "time": p.time,
        "time_kind": p.time_kind if p.time is not None else TimeKind.NONE,
        "host": p.host or ctx.host_hint,
        "rank": p.rank,
        "gpu_index": p.gpu_index,
        "evidence": (ctx.evidence(text),),
    }


def event_from_xid(m: XidMatch, text: str, ctx: LineContext) -> FailureEvent:
    kw = _base_kwargs(ctx, text)
    fields: list[tuple[str, str]] = []
    if m.switch:
        # The driver prints each SXid as a "Fatal"/"Non-fatal" line plus "Data {...}" and
        # "Severity N ..." companions that name no severity: those are details, not new errors.
        fatal = m.switch_fatal is True
        companion = m.switch_fatal is None
        return FailureEvent(
            category=Category.NVLINK_INTERCONNECT,
            action=Action.REBOOT_NODE if fatal else Action.NONE,
            severity=Severity.FATAL if fatal else (Severity.INFO if companion
                                                   else Severity.NON_FATAL),
            signature="nvswitch_sxid", summary=f"NVSwitch SXid {m.xid}: {m.message}"[:300],
            gpu_pci=m.pci, xid=None, confidence=0.9 if fatal else 0.6,
            fields=(("sxid", str(m.xid)), ("switch_pci", m.pci)), **kw,  # type: ignore[arg-type]
        )
    info = xid_info(m.xid)
    category, action, severity = info.category, info.action, info.severity
    confidence = 0.95
    if info.xid in _SELF_GRADED_XIDS and _NONFATAL_WORD.search(m.message):
        # NVLink5 XIDs grade themselves in the message: a corrected link error needs no reboot.
        action, severity = Action.NONE, Severity.NON_FATAL
    if m.recovery_action is not None:  # XID 154 says what the GPU needs
        action, severity = recovery_action_to_action(m.recovery_action)
        fields.append(("recovery_action", m.recovery_action))
    if m.caused_by is not None and m.caused_by not in CONSEQUENCE_XIDS:
        # "45 ... caused by previous Xid 149": the primary XID says what actually broke.
        primary = xid_info(m.caused_by)
        if primary.severity is not Severity.INFO or severity is Severity.INFO:
            category, action = primary.category, primary.action
            severity = max(severity, primary.severity, key=lambda s: SEVERITY_RANK[s])
        confidence = 0.75
    elif m.xid in CONSEQUENCE_XIDS:
        confidence = 0.4
    elif m.xid in APP_FAULT_XIDS:
        confidence = 0.7
    if m.inferred:
        confidence = 0.9
        fields.append(("inferred_from", "fallen-off-the-bus message"))
    if m.pid and m.pid != "<unknown>":
        fields.append(("pid", m.pid))
    if m.process and m.process != "<unknown>":
        fields.append(("process", m.process))
    caused = f" (after XID {m.caused_by})" if m.caused_by else ""
    msg = f": {m.message}" if m.message else ""
    return FailureEvent(
        category=category, action=action, severity=severity,
        signature="xid_fallen_off_bus" if m.inferred else "xid",
        summary=f"XID {m.xid} {info.name}{caused}{msg}"[:300],
        gpu_pci=m.pci or None, xid=m.xid, caused_by_xid=m.caused_by, confidence=confidence,
        fields=tuple(fields), **kw,  # type: ignore[arg-type]
    )


def event_from_rule(m: RuleMatch, text: str, ctx: LineContext,
                    extra_fields: Sequence[tuple[str, str]] = ()) -> FailureEvent:
    kw = _base_kwargs(ctx, text)
    g = m.groups
    rule = m.rule
    if "host" in g:
        kw["host"] = g["host"]
    if (rank := _int(g.get("rank"))) is not None:
        kw["rank"] = rank
    if (gi := _int(g.get("gpu_index"))) is not None:
        kw["gpu_index"] = gi
    gpu_pci = normalize_pci(g["gpu_pci"]) if g.get("gpu_pci", "").count(":") >= 2 else None
    category, action, severity, confidence = rule.category, rule.action, rule.severity, \
        rule.confidence
    fields = tuple((k, v[:500]) for k, v in g.items()
                   if k not in ("rank", "host", "gpu_pci", "gpu_index")) + tuple(extra_fields)
    summary = render_summary(rule.summary, g)
    if rule.id == CUDA_RULE_ID and (error := identify_cuda_error(text)) is not None:
        read = cuda_reading(error)
        category, action, confidence = read.category, read.action, read.confidence
        summary = f"CUDA error {error.code} {error.name}: {error.message or error.name}"
        fields += (("cuda_code", str(error.code)), ("cuda_name", error.name))
    if rule.category is Category.UNKNOWN:
        category, action, confidence, signal = _category_from_exit(g, category, action,
                                                                   confidence)
        if signal is not None:
            fields += ((SIGNAL_FIELD, signal),)
    return FailureEvent(
        category=category, action=action, severity=severity, signature=rule.id,
        summary=summary[:300], gpu_pci=gpu_pci,
        xid=_int(g.get("xid")), confidence=confidence, fields=fields,
        **kw,  # type: ignore[arg-type]
    )


def _category_from_exit(groups: dict[str, str], category: Category, action: Action,
                        confidence: float) -> tuple[Category, Action, float, str | None]:
    """A launcher's exit status or signal hints at the cause when nothing better is in the log
    (``signals.py``: every form of one signal reads the same); the last item names the signal
    when the hint comes from one."""
    exit_code = _int(groups.get("exit_code"))
    signal = signal_of_status(exit_code) if exit_code is not None else None
    named = groups.get("signal") or groups.get("signal_name")
    if signal is None and named:
        signal = signal_number(named)
    cause = signal_cause(signal)
    if cause is not None:
        return cause.category, cause.action, cause.confidence, cause.name
    if exit_code in (1, 2):
        return Category.USER_CODE_ERROR, Action.FIX_CODE, 0.2, None
    return category, action, confidence, None


def event_from_suspicion(text: str, ctx: LineContext) -> FailureEvent | None:
    """An informational ``unknown`` event for a line with failure words, else ``None``."""
    found = suspicion(text)
    if found is None:
        return None
    return FailureEvent(
        category=Category.UNKNOWN, action=Action.NONE, severity=Severity.INFO,
        signature=SUSPICION_SIGNATURE,
        summary=f"no known signature; failure words: {', '.join(found.words)}",
        confidence=found.confidence, fields=(("words", " ".join(found.words)),),
        **_base_kwargs(ctx, text),  # type: ignore[arg-type]
    )


def classify_line(rules: RuleSet, text: str, ctx: LineContext,
                  following: Sequence[str] = (), suspicious: bool = False
                  ) -> FailureEvent | None:
    """Classify one line; ``None`` when no signature matches.

    With ``suspicious``, a line no signature explains but that carries failure words gives an
    informational ``failure_words`` event (see ``suspicion.py``).
    """
    if "Xid" in text or "XID" in text or "fallen off the bus" in text \
            or FALLEN_OFF_START in text:
        if FALLEN_OFF_START in text and "fallen off" not in text:
            text_joined = " ".join((text, *following[:3]))
            xm = parse_xid_line(text_joined)
            if xm is not None and xm.inferred:
                return event_from_xid(xm, text, ctx)
        xm = parse_xid_line(text)
        if xm is not None:
            return event_from_xid(xm, text, ctx)
    rm = rules.match(text, following)
    if rm is None:
        return event_from_suspicion(text, ctx) if suspicious else None
    return event_from_rule(rm, text, ctx)


__all__ = ["LineContext", "classify_line", "event_from_rule", "event_from_suspicion",
           "event_from_xid"]
