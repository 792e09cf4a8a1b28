"""Text from logs made safe to print on an operator's terminal.

Log lines are somebody else's bytes: a rank, a kernel, a pasted file. Printed as they are, an
escape sequence in one of them can recolour the terminal, move the cursor, rewrite the window
title or (with OSC 52) reach the clipboard. :func:`terminal_safe` drops ANSI escape sequences
(CSI, OSC, DCS and the rest) and turns every other control character into a visible ``?``; tabs
stay, and newlines stay only when asked for. :func:`strip_escapes` only drops the sequences:
the log classifier reads a coloured line (a coloured logger, a terminal recorded with
``script``) as its plain text.

    >>> terminal_safe("\\x1b[31mred\\x1b[0m alert\\x1b]0;owned\\x07!")
    'red alert!'
    >>> terminal_safe("a\\x00b\\rc")
    'a?b?c'
"""

from __future__ import annotations

import re

# ESC [ ... final byte (CSI); ESC ] / P / X / ^ / _ ... BEL or ESC \ (OSC, DCS, SOS, PM, APC);
# ESC followed by one intermediate/final byte; the 8-bit C1 forms of CSI and OSC.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x9d\x98\x9e\x9f])[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
_INTRODUCER = re.compile(r"[\x1b\x90\x98\x9b\x9d\x9e\x9f]")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROLS_KEEP_NL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_escapes(text: str) -> str:
    """``text`` without ANSI escape sequences; every other character is kept.

        >>> strip_escapes("\\x1b[1;31mKilled\\x1b[0m")
        'Killed'
    """
    return _ESCAPES.sub("", text) if _INTRODUCER.search(text) else text


def terminal_safe(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences; other control characters become ``?``."""
    if text.isprintable():
        return text
    text = _ESCAPES.sub("", text)
    return (_CONTROLS_KEEP_NL if keep_newlines else _CONTROLS).sub("?", text)


__all__ = ["strip_escapes", "terminal_safe"]
