"""Mount paths as the kernel prints them in mountstats and /proc/mounts (octal escapes)."""

from __future__ import annotations

import re

__all__ = ["escape_path", "unescape_path"]

_OCTAL_ESCAPE = re.compile(r"\\([0-3][0-7]{2})")


def unescape_path(text: str) -> str:
    """A device name or mount path as the kernel printed it, with its octal escapes decoded.

    mountstats (like /proc/mounts) writes space, tab, newline and backslash as ``\\ooo``
    (``/mnt/my\\040data`` is ``/mnt/my data``), so that fields stay split on spaces.

        >>> unescape_path(r"/mnt/my\\040data")
        '/mnt/my data'
    """
    if "\\" not in text:
        return text
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def escape_path(path: str) -> str:
    """The inverse of `unescape_path`: a path as /proc/mounts and mountstats print it."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)
