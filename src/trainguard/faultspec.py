"""Fault specs: one line that says which failure to inject, where and when.

Used by ``trainguard run --inject SPEC`` (the supervisor fires the SUPERVISOR_KINDS) and by the
training SDK (``trainguard.train`` fires the SDK_KINDS inside the training process, reading them
from ``TRAINGUARD_INJECT``). Syntax::

    KIND[:key=value[,key=value...]]

    kill:rank=1,step=20              SIGKILL rank 1 when it reaches step 20
    nan:step=30                      the loss reported at step 30 becomes NaN
    xid:node=node2,xid=79,after=5    append an XID 79 line to node2's kernel log after 5 s
    slow:rank=0,delay=0.3            rank 0 sleeps 0.3 s extra in every step
    corrupt_checkpoint:step=40       damage the first checkpoint saved at step >= 40

Keys: ``rank``, ``node``, ``step``, ``after`` (seconds after launch), ``attempt`` (0-based launch
of the job, default 0; ``*`` = every attempt), ``xid``, ``delay`` (seconds), ``code`` (exit code).
Several specs travel in one environment variable joined with ``;`` (`join_faults`).

Everything here is pure: parsing and formatting, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from trainguard.errors import ConfigError

__all__ = [
    "SDK_KINDS",
    "SUPERVISOR_KINDS",
    "FaultKind",
    "FaultSpec",
    "format_fault",
    "join_faults",
    "parse_fault",
    "parse_faults",
    "split_faults",
]

SEPARATOR = ";"


class FaultKind(StrEnum):
    """What failure to inject."""

    KILL = "kill"
    """SIGKILL a rank (supervisor)."""
    HANG = "hang"
    """SIGSTOP a rank (supervisor)."""
    SLOW = "slow"
    """The rank sleeps ``delay`` seconds extra in every step from ``step`` on (SDK)."""
    NAN = "nan"
    """The loss reported to the SDK at ``step`` becomes NaN (SDK)."""
    CORRUPT_CHECKPOINT = "corrupt_checkpoint"
    """After the SDK saves the checkpoint of step >= ``step``, damage its largest file (SDK)."""
    XID = "xid"
    """Append an NVRM XID line to a node's kernel log (supervisor)."""
    ALERT = "alert"
    """Append a detector alert on a node to the watched alerts file (supervisor): replays the
    detector's alert for that node from ``--alerts-replay``, else a synthetic hard alert."""
    CUDA_ERROR = "cuda_error"
    """The rank prints a CUDA error traceback to stderr and exits with ``code`` (SDK)."""
    EXCEPTION = "exception"
    """The rank raises ``RuntimeError("trainguard injected exception at step N")`` (SDK)."""


SDK_KINDS: frozenset[FaultKind] = frozenset(
    {
        FaultKind.SLOW,
        FaultKind.NAN,
        FaultKind.CORRUPT_CHECKPOINT,
        FaultKind.CUDA_ERROR,
        FaultKind.EXCEPTION,
    }
)
"""Fired inside the training process by ``trainguard.train``."""

SUPERVISOR_KINDS: frozenset[FaultKind] = frozenset(
    {FaultKind.KILL, FaultKind.HANG, FaultKind.XID, FaultKind.ALERT})
"""Fired from outside by the supervisor."""

# Keys that only mean something for some kinds: giving them elsewhere is almost certainly a typo
# of the kind, so the parser rejects them instead of silently ignoring them.
_KIND_ONLY_KEYS: dict[str, frozenset[FaultKind]] = {
    "xid": frozenset({FaultKind.XID}),
    "delay": frozenset({FaultKind.SLOW}),
    "code": frozenset({FaultKind.CUDA_ERROR}),
}
_KEYS = ("rank", "node", "step", "after", "attempt", "xid", "delay", "code")  # canonical order
_INT_RE = re.compile(r"[0-9]+")
_NODE_RE = re.compile(r"[A-Za-z0-9_.:\-\[\]]+")


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault to inject.

    >>> spec = parse_fault("kill:rank=1,step=20")
    >>> spec.kind, spec.rank, spec.step
    (<FaultKind.KILL: 'kill'>, 1, 20)
    >>> str(spec)
    'kill:rank=1,step=20'
    >>> spec.applies_to(attempt=0, rank=1), spec.applies_to(attempt=1, rank=1)
    (True, False)
    """

    kind: FaultKind
    """What to inject."""
    rank: int | None = None
    """Target rank; None = every rank for SDK kinds (kill/hang: the supervisor picks rank 0)."""
    node: str | None = None
    """Target node (hostname as the supervisor names it); None = any node."""
    step: int | None = None
    """Fire when the rank reaches this step; None = from the first step."""
    after_s: float | None = None
    """Fire this many seconds after launch (key ``after``); None = no time condition."""
    attempt: int | None = 0
    """Which launch of the job (0-based); None (``*``) = every attempt."""
    xid: int = 79
    """XID number for kind ``xid``."""
    delay_s: float = 0.5
    """Extra seconds per step for kind ``slow`` (key ``delay``)."""
    exit_code: int = 1
    """Exit status for kind ``cuda_error`` (key ``code``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, FaultKind):
            raise ConfigError(f"fault kind must be a FaultKind, got {self.kind!r}")
        for key, value in (
            ("rank", self.rank),
            ("step", self.step),
            ("attempt", self.attempt),
            ("xid", self.xid),
            ("code", self.exit_code),
        ):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"fault {key} must be an integer, got {value!r}")
            if value < 0:
                raise ConfigError(f"fault {key} must be >= 0, got {value}")
        if self.exit_code > 255:
            raise ConfigError(f"fault code must be <= 255, got {self.exit_code}")
        for key, fvalue in (("after", self.after_s), ("delay", self.delay_s)):
            if fvalue is None:
                continue
            if isinstance(fvalue, bool) or not isinstance(fvalue, int | float):
                raise ConfigError(f"fault {key} must be a number, got {fvalue!r}")
            if not math.isfinite(fvalue) or fvalue < 0:
                raise ConfigError(f"fault {key} must be a finite number >= 0, got {fvalue}")
        if self.node is not None and not _NODE_RE.fullmatch(self.node):
            raise ConfigError(f"fault node must be a host name, got {self.node!r}")

    @property
    def in_sdk(self) -> bool:
        """True when the training SDK fires this fault (not the supervisor)."""
        return self.kind in SDK_KINDS

    def applies_to(self, attempt: int, rank: int | None, node: str | None = None) -> bool:
        """Whether this fault targets launch `attempt` of `rank` (on `node`).

        ``rank=None`` (or ``node=None``) asks without a rank (node) filter, e.g. for a node-level
        fault such as ``xid``.
        """
        if self.attempt is not None and self.attempt != attempt:
            return False
        if self.rank is not None and rank is not None and self.rank != rank:
            return False
        return not (self.node is not None and node is not None and self.node != node)

    def __str__(self) -> str:
        return format_fault(self)


def _format_float(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def format_fault(spec: FaultSpec) -> str:
    """The canonical text of `spec`: keys in a fixed order, defaults left out.

    ``parse_fault(format_fault(spec)) == spec`` for every valid spec.
    """
    default = FaultSpec(spec.kind)
    parts: list[str] = []
    if spec.rank is not None:
        parts.append(f"rank={spec.rank}")
    if spec.node is not None:
        parts.append(f"node={spec.node}")
    if spec.step is not None:
        parts.append(f"step={spec.step}")
    if spec.after_s is not None:
        parts.append(f"after={_format_float(spec.after_s)}")
    if spec.attempt != default.attempt:
        parts.append("attempt=*" if spec.attempt is None else f"attempt={spec.attempt}")
    if spec.xid != default.xid:
        parts.append(f"xid={spec.xid}")
    if spec.delay_s != default.delay_s:
        parts.append(f"delay={_format_float(spec.delay_s)}")
    if spec.exit_code != default.exit_code:
        parts.append(f"code={spec.exit_code}")
    return f"{spec.kind.value}:{','.join(parts)}" if parts else spec.kind.value


class _SpecError(Exception):
    """A problem with one spec; `parse_fault` turns it into a ConfigError naming the spec."""


def _parse_int(key: str, value: str) -> int:
    if value.startswith("-") and _INT_RE.fullmatch(value[1:]):
        raise _SpecError(f"{key} must be >= 0, got {value}")
    if not _INT_RE.fullmatch(value):
        raise _SpecError(f"{key} must be a non-negative integer, got {value!r}")
    return int(value)


def _parse_float(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise _SpecError(f"{key} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(number):
        raise _SpecError(f"{key} must be finite, got {value!r}")
    if number < 0:
        raise _SpecError(f"{key} must be >= 0, got {value}")
    return number


def _parse(text: str) -> FaultSpec:
    kind_text, sep, rest = text.partition(":")
    kind_text = kind_text.strip().lower()
    if not kind_text:
        raise _SpecError("missing fault kind")
    try:
        kind = FaultKind(kind_text)
    except ValueError:
        known = ", ".join(k.value for k in FaultKind)
        raise _SpecError(f"unknown fault kind {kind_text!r} (known: {known})") from None
    values: dict[str, str] = {}
    if sep and not rest.strip():
        raise _SpecError("nothing after ':' (remove it or add key=value pairs)")
    for item in rest.split(",") if rest.strip() else ():
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key:
            raise _SpecError(f"expected key=value, got {item.strip()!r}")
        if key not in _KEYS:
            raise _SpecError(f"unknown key {key!r} (known: {', '.join(_KEYS)})")
        if key in values:
            raise _SpecError(f"duplicate key {key!r}")
        if not value:
            raise _SpecError(f"empty value for {key!r}")
        only = _KIND_ONLY_KEYS.get(key)
        if only is not None and kind not in only:
            kinds = ", ".join(sorted(k.value for k in only))
            raise _SpecError(f"key {key!r} only applies to kind {kinds}")
        values[key] = value

    default = FaultSpec(kind)
    node = values.get("node")
    if node is not None and not _NODE_RE.fullmatch(node):
        raise _SpecError(f"node must be a host name, got {node!r}")
    attempt: int | None = default.attempt
    if "attempt" in values:
        attempt = None if values["attempt"] == "*" else _parse_int("attempt", values["attempt"])
    code = _parse_int("code", values["code"]) if "code" in values else default.exit_code
    if code > 255:
        raise _SpecError(f"code must be <= 255, got {code}")
    return FaultSpec(
        kind,
        rank=_parse_int("rank", values["rank"]) if "rank" in values else None,
        node=node,
        step=_parse_int("step", values["step"]) if "step" in values else None,
        after_s=_parse_float("after", values["after"]) if "after" in values else None,
        attempt=attempt,
        xid=_parse_int("xid", values["xid"]) if "xid" in values else default.xid,
        delay_s=_parse_float("delay", values["delay"]) if "delay" in values else default.delay_s,
        exit_code=code,
    )


def parse_fault(text: str) -> FaultSpec:
    """Parse one spec such as ``kill:rank=1,step=20``; `ConfigError` names the spec and problem.

    >>> parse_fault("slow:rank=0,delay=0.3").delay_s
    0.3
    """
    if not text.strip():
        raise ConfigError("fault spec is empty (expected KIND[:key=value,...], e.g. nan:step=30)")
    try:
        return _parse(text.strip())
    except (_SpecError, ConfigError) as exc:
        raise ConfigError(f"invalid fault spec {text.strip()!r}: {exc}") from None


def parse_faults(texts: Iterable[str]) -> tuple[FaultSpec, ...]:
    """Parse several specs (e.g. repeated ``--inject`` options), in order."""
    return tuple(parse_fault(text) for text in texts)


def join_faults(specs: Iterable[FaultSpec]) -> str:
    """Canonical specs joined with ``;`` for the ``TRAINGUARD_INJECT`` environment variable."""
    return SEPARATOR.join(format_fault(spec) for spec in specs)


def split_faults(text: str) -> tuple[FaultSpec, ...]:
    """Inverse of `join_faults`; empty pieces (``a;;b``, trailing ``;``, ``""``) are skipped."""
    return parse_faults(piece for piece in text.split(SEPARATOR) if piece.strip())
