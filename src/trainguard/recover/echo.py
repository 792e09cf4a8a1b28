"""What the terminal shows of the ranks' output: a failure's consequences folded to one line.

When one rank dies, every healthy peer raises in its next collective ("Connection reset by
peer", an NCCL watchdog timeout): pages of tracebacks that bury the one line that matters. The
echo passes ordinary lines through at once, but holds each Python traceback back until it is
known whether it is the cause or a consequence:

- while the attempt is healthy, a held traceback is shown in full after ``hold_s`` (a traceback
  the script caught and logged, training going on);
- once a rank has failed, tracebacks are held until the attempt's verdict;
- at the verdict (:meth:`RankEcho.settle`), the culprit rank's tracebacks are shown in full and
  every other rank's are counted in one line that names its log file.

Folding is only what is echoed: every line stays in the per-rank output files.

    echo = RankEcho(write, hold_s=5.0)       # write(rank, node, line)
    echo.feed(rank, node, line, now)         # each output line, in order
    echo.release(now, trouble=False)         # each poll
    echo.settle(culprits={1}, logs={2: "attempts/0/node09/rank2.log"}, why="rank 1 failed")
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from trainguard.recover.failure import Failure, FailureKind

Write = Callable[[int, str, str], None]
"""``write(rank, node, line)``: one line to the terminal."""

_START = re.compile(r"^(?P<prefix>.*?)Traceback \(most recent call last\):\s*$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# Lines that continue an exception's message: torch's C++ context, chained tracebacks.
_CONTINUES = re.compile(r"^(?:\s|$|Exception raised from |frame #\d+: |During handling |"
                        r"The above exception |Traceback \(most recent call last\))")
_EXCERPT = 160


@dataclass(slots=True)
class _Block:
    """One traceback as it is read: its lines, and whether its exception line has come."""

    prefix: str
    lines: list[str]
    last_at: float
    exception: str = ""

    @property
    def complete(self) -> bool:
        return bool(self.exception)


@dataclass(slots=True)
class _Rank:
    node: str
    open: _Block | None = None
    held: list[_Block] = field(default_factory=list)


def exception_excerpt(text: str, limit: int = _EXCERPT) -> str:
    """The exception line, shortened for a one-line summary."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


class RankEcho:
    """Echoes rank output, folding tracebacks that are a failure's consequences."""

    def __init__(self, write: Write, *, hold_s: float = 5.0) -> None:
        self._write = write
        self.hold_s = hold_s
        self._ranks: dict[int, _Rank] = {}

    def feed(self, rank: int, node: str, line: str, now: float) -> None:
        """One line of a rank's output, in the order the rank wrote it."""
        state = self._ranks.setdefault(rank, _Rank(node))
        block = state.open
        if block is not None and self._extends(block, line):
            block.lines.append(line)
            block.last_at = now
            return
        if block is not None:  # ended by an ordinary line
            self._close(state)
        match = _START.match(line)
        if match is not None:
            state.open = _Block(match.group("prefix"), [line], now)
        else:
            self._write(rank, node, line)

    @staticmethod
    def _extends(block: _Block, line: str) -> bool:
        if not line.startswith(block.prefix):
            return False
        body = line[len(block.prefix):]
        if not block.complete:
            # frames, source lines and carets are indented; anything else is the exception
            if not body[:1].isspace() and body.strip() and not body.startswith(_CHAINED) \
                    and not _START.match(body):
                block.exception = body.strip()
            return True
        if _CONTINUES.match(body):
            if body.startswith(_CHAINED) or _START.match(body):
                block.exception = ""  # another traceback follows: its exception ends it
            return True
        return False

    def _close(self, state: _Rank) -> None:
        block, state.open = state.open, None
        if block is not None:
            state.held.append(block)

    def release(self, now: float, *, trouble: bool) -> None:
        """Show the held tracebacks of a healthy attempt that are ``hold_s`` old."""
        if trouble:
            return
        for rank, state in self._ranks.items():
            if state.open is not None and state.open.complete \
                    and now - state.open.last_at >= self.hold_s:
                self._close(state)
            due = [b for b in state.held if now - b.last_at >= self.hold_s]
            for block in due:
                self._show(rank, state.node, block)
            state.held = [b for b in state.held if b not in due]

    def settle(self, *, culprits: Collection[int] | None, logs: Mapping[int, str],
               why: str) -> None:
        """The attempt ended. ``culprits``: the ranks whose tracebacks are shown in full (None:
        every rank's, as after a success); the others' are counted, one line per rank."""
        order = sorted(self._ranks, key=lambda r: (culprits is not None and r not in culprits, r))
        for rank in order:
            state = self._ranks[rank]
            self._close(state)
            if not state.held:
                continue
            if culprits is None or rank in culprits:
                for block in state.held:
                    self._show(rank, state.node, block)
            else:
                self._write(rank, state.node, fold_line(
                    len(state.held), state.held[-1].exception, why, logs.get(rank)))
            state.held = []

    def _show(self, rank: int, node: str, block: _Block) -> None:
        for line in block.lines:
            self._write(rank, node, line)


def after_what(failure: Failure) -> str:
    """What the folded tracebacks came after, e.g. ``rank 1 failed``."""
    if failure.kind is FailureKind.HANG:
        return "the hang"
    if failure.kind is FailureKind.CANCELLED:
        return "the cancel"
    if failure.culprit_rank is not None:
        return f"rank {failure.culprit_rank} failed"
    if failure.culprit_nodes:
        return f"{', '.join(failure.culprit_nodes)} failed"
    return "the failure"


def fold_line(count: int, exception: str, why: str, log: str | None) -> str:
    """The one line that stands for a rank's folded tracebacks."""
    what = f"{count} traceback{'s' if count != 1 else ''}"
    last = f": {exception_excerpt(exception)}" if exception else ""
    where = f"; full text in {log}" if log else ""
    return f"({what} after {why} not shown{last}{where})"


__all__ = ["RankEcho", "Write", "after_what", "exception_excerpt", "fold_line"]
