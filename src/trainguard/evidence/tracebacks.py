"""Python tracebacks in logs: find the exception line a traceback ends with, and its event.

A traceback header (``Traceback (most recent call last):``) says little; its final exception
line says what broke. :func:`find_exception_line` reads forward from the header, skipping other
ranks' interleaved output, frames and chained-exception banners; the scanner classifies the line
it finds with the same rules as any other line and :func:`with_traceback` credits the event with
the header and the last frame.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from trainguard.evidence.classify import LineContext, event_from_rule
from trainguard.evidence.events import EvidenceLine, FailureEvent
from trainguard.evidence.rules import TRACEBACK_KEYWORD, RuleMatch, RuleSet
from trainguard.taxonomy import Action, Category, Severity

_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,5}: )")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC_NAME = re.compile(r"(?:Error|Exception|Exit|Interrupt|Failure|Warning)$")
MAX_FRAME_LINES = 120
_DIGIT = re.compile(r"\d")
_EXC_LINE = re.compile(r"^(?P<exc_type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::\s?(?P<message>.*))?$")


@dataclass(frozen=True, slots=True)
class ExceptionLine:
    """The line a traceback ends with."""

    offset: int
    """Lines after the header."""
    raw: str
    body: str
    """``raw`` without the launcher's rank prefix or the collector's prefix."""
    exc_type: str
    last_frame: str | None
    """``file:line in func`` of the innermost frame."""
    frames: tuple[str, ...] = ()
    """The traceback's frame and source lines (stripped, at most :data:`MAX_FRAME_LINES`): the
    context the exception happened in (``torch.save``, ``load_checkpoint``...)."""


def strip_rank_prefix(line: str, indent: int | None = None) -> tuple[str, str, int]:
    """Split a launcher's rank prefix off; keep the body's own indentation.

    ``indent`` is how many spaces the launcher put after its prefix (taken from the traceback
    header); only those are removed, so frame lines stay indented relative to the header.
    """
    m = _RANK_PREFIX.match(line)
    if not m:
        return "", line, 0
    body = line[m.end():]
    pad = len(body) - len(body.lstrip(" ")) if indent is None else indent
    cut = min(pad, len(body) - len(body.lstrip(" ")))
    return m.group(0), body[cut:], pad


def shape(text: str) -> str:
    """``text`` with every digit read as 0: a collector's prefix keeps its shape from line to
    line while its time stamp, counter or pid changes."""
    return _DIGIT.sub("0", text)


def collector_prefix(header: str) -> str:
    """What a collector wrote before ``Traceback (most recent call last):`` on the header line
    (a time stamp, ``(RayTrainWorker pid=..)``, docker compose's ``worker-1  | ``, a quoting
    ``> ``), without the spaces after it; ``""`` when the header starts the line or the prefix
    is a launcher's rank prefix (:func:`strip_rank_prefix` reads those)."""
    at = header.find(TRACEBACK_KEYWORD)
    if at <= 0 or _RANK_PREFIX.match(header):
        return ""
    return header[:at].rstrip(" ")


def strip_collector_prefix(line: str, prefix: str, indent: int) -> tuple[bool, str]:
    """Whether ``line`` carries ``prefix`` (digits aside), and its body without the prefix and
    the ``indent`` spaces the collector put after it (the body's own indentation stays)."""
    head = line[:len(prefix)]
    if head != prefix and shape(head) != shape(prefix):
        return False, line
    body = line[len(prefix):]
    return True, body[min(indent, len(body) - len(body.lstrip(" "))):]


def find_exception_line(header: str, after: Sequence[str]) -> ExceptionLine | None:
    """The exception line ending the traceback that starts at ``header``, if it is in ``after``.

    Lines carrying the header's launcher prefix (``[rank3]:``) or collector prefix (see
    :func:`collector_prefix`) are the traceback's; others are interleaved output. A header whose
    prefix its frames do not carry (a logger's ``ERROR ...`` before the banner) is read as
    before, prefix-free.
    """
    collector = collector_prefix(header)
    if collector:
        after_header = header[len(collector):]
        indent = len(after_header) - len(after_header.lstrip(" "))
        found = _read_traceback(
            after, lambda raw: strip_collector_prefix(raw, collector, indent))
        if found is not None:
            return found
    prefix, _, pad = strip_rank_prefix(header)

    def by_rank(raw: str) -> tuple[bool, str]:
        p, body, _ = strip_rank_prefix(raw, pad)
        return p == prefix, body

    return _read_traceback(after, by_rank)


def _read_traceback(after: Sequence[str], own: Callable[[str], tuple[bool, str]]
                    ) -> ExceptionLine | None:
    """The first exception line in ``after`` among the lines ``own`` claims (with their body)."""
    last_frame: str | None = None
    frames: list[str] = []
    for offset, raw in enumerate(after, start=1):
        mine, body = own(raw)
        if not mine:
            continue  # another rank's or source's interleaved output
        fm = _FRAME.match(body)
        if fm or not body.strip() or body.startswith((" ", "\t")) or body.startswith("^"):
            if fm:
                last_frame = f'{fm.group("file")}:{fm.group("line")} in {fm.group("func")}'
            if body.strip() and len(frames) < MAX_FRAME_LINES:
                frames.append(body.strip()[:300])
            continue
        if body.startswith(("Traceback", "During handling", "The above exception")):
            continue
        exc = _EXC_LINE.match(body.strip())
        if exc is None or (exc.group("message") is None
                           and not _EXC_NAME.search(exc.group("exc_type"))):
            continue
        return ExceptionLine(offset, raw, body, exc.group("exc_type"), last_frame,
                             tuple(frames))
    return None


def python_exception_event(rules: RuleSet, found: ExceptionLine, ctx: LineContext
                           ) -> FailureEvent:
    """The event for an exception line no specific rule claimed."""
    rule = rules.by_id.get("python_exception")
    m = rule.pattern.search(found.body) if rule else None
    if rule is not None and m is not None:
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        return event_from_rule(RuleMatch(rule, groups, m.group(0)), found.raw, ctx)
    return FailureEvent(
        category=Category.USER_CODE_ERROR, action=Action.FIX_CODE,
        severity=Severity.FATAL, signature="python_exception",
        summary=found.body.strip()[:300], confidence=0.45,
        time=ctx.prefix.time, time_kind=ctx.prefix.time_kind,
        host=ctx.prefix.host or ctx.host_hint, rank=ctx.prefix.rank,
        evidence=(ctx.evidence(found.raw),))


def with_traceback(ev: FailureEvent, found: ExceptionLine, header: EvidenceLine
                   ) -> FailureEvent:
    """``ev`` credited with the traceback: its header line, exception type and last frame."""
    extra = [("exc_type", found.exc_type)]
    if found.last_frame:
        extra.append(("last_frame", found.last_frame))
    known = {k for k, _ in ev.fields}
    fields = ev.fields + tuple(kv for kv in extra if kv[0] not in known)
    return replace(ev, fields=fields, evidence=(header, *ev.evidence))


__all__ = ["MAX_FRAME_LINES", "ExceptionLine", "collector_prefix",
           "find_exception_line", "python_exception_event", "shape", "strip_collector_prefix",
           "strip_rank_prefix", "with_traceback"]
