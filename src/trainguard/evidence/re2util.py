"""RE2 compilation shared by the signature rules and the catalogs that read lines.

Every pattern that reads a log line is compiled with RE2, never with Python's backtracking ``re``:
RE2 matches in time linear in the text, so no line, however hostile, can stall a scan (see
``rules.py``). This module holds the compiled-pattern protocol and the compiler, so the code-driven
catalogs (``cuda_errors.py``) and the rule set share them without importing each other.
"""

from __future__ import annotations

from typing import Any, Protocol

import re2

_RE2_MAX_MEM = 64 << 20


class PatternMatch(Protocol):
    """The part of a match object the rules use (RE2's and ``re``'s both fit)."""

    def group(self, index: int = 0, /) -> Any: ...

    def groupdict(self) -> dict[str, Any]: ...


class Pattern(Protocol):
    """A compiled pattern: RE2 for everything built here."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: Any, /) -> PatternMatch | None: ...


def compile_re2(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """``pattern`` compiled with RE2 (linear-time matching); raises ``re2.error``."""
    opts = re2.Options()
    opts.log_errors = False  # RE2 would print "Error parsing ..." to stderr itself
    opts.max_mem = _RE2_MAX_MEM
    opts.case_sensitive = not ignore_case
    compiled: Pattern = re2.compile(pattern, opts)
    return compiled


__all__ = ["Pattern", "PatternMatch", "compile_re2"]
