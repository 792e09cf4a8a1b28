"""Parse the JSON files of a checkpoint (manifest, tensor table, shard markers) defensively.

They come from disk, so they may be damaged, written by another version, or crafted. Each is
bounded in size and in nesting depth *before* `json.loads` sees it (a deeply nested document
would otherwise end in a `RecursionError`), and anything that does not parse becomes a
`CheckpointError` whose message is the reason: the checkpoint is unreadable, never a traceback.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainguard.errors import CheckpointError

__all__ = ["MAX_DEPTH", "MAX_JSON_BYTES", "nesting_depth", "parse_json"]

MAX_JSON_BYTES = 64 << 20
"""Largest JSON file of a checkpoint read (a manifest of 40 000 files is about 5 MB)."""
MAX_DEPTH = 32
"""Deepest nesting of objects/arrays accepted (our own files nest 3 levels, plus free-form
``meta``)."""

# A JSON string (escapes included; unrolled so long strings do not backtrack), and brackets.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def nesting_depth(text: str, stop_above: int | None = None) -> int:
    """The deepest nesting of ``[``/``{`` in JSON `text` (brackets inside strings do not count);
    counting stops once it passes `stop_above`.

    >>> nesting_depth('{"a": [1, {"b": "[[["}]}')
    3
    """
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if stop_above is not None and deepest > stop_above:
                break
        else:
            depth -= 1
    return deepest


def parse_json(data: str | bytes, what: str, *, max_bytes: int = MAX_JSON_BYTES,
               max_depth: int = MAX_DEPTH) -> Any:
    """`data` parsed, or `CheckpointError` ``unparsable <what>: <reason>``."""
    if len(data) > max_bytes:
        raise CheckpointError(
            f"unparsable {what}: {len(data)} bytes, more than the {max_bytes} allowed")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"unparsable {what}: {exc}") from None
    if nesting_depth(data, stop_above=max_depth) > max_depth:
        raise CheckpointError(f"unparsable {what}: nested more than {max_depth} levels deep")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"unparsable {what}: {exc}") from None
