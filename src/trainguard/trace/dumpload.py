"""Loading a flight-recorder dump's bytes into plain data, defensively.

A dump comes from disk (another machine, a bug report), so it may be damaged or crafted:

1. a pickle is read by an unpickler whose allowlist of globals, `ALLOWED_GLOBALS`, is empty
   (PyTorch pickles the dump as dicts, lists, tuples, strings, numbers, booleans and None, which
   need no global), so ``os.system``, ``builtins.exec`` or any class is refused, never imported;
2. JSON whose nesting exhausts the decoder's recursion is refused, not a `RecursionError`;
3. either way the loaded object may nest at most `MAX_DEPTH` containers, so later code (and
   ``repr`` in error messages) never recurses without bound.

    >>> load_dump(b'{"version": "2.10"}', "trace_0.json")
    {'version': '2.10'}
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from trainguard.errors import TraceError

__all__ = ["ALLOWED_GLOBALS", "MAX_DEPTH", "load_dump"]

MAX_DEPTH = 32
"""Deepest nesting of containers accepted in a dump (a real one nests 5 levels: the dump, its
entries, an entry, its input sizes, one shape)."""
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset()
"""The exact (module, name) pairs a pickled dump may name: none. PyTorch pickles the dump as
dicts, lists, tuples, strings, numbers, booleans and None, which need no global; anything else
(``os.system``, ``builtins.exec``, any class) is refused, never imported."""
_CONTAINERS = (dict, list, tuple, set, frozenset)
"""What an unpickler without globals, or the JSON decoder, builds that can nest."""


class _RefusingUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the exact names of `ALLOWED_GLOBALS` (none): any other
    global a pickle asks for is refused before it is imported (the way a crafted pickle would
    reach ``os.system``)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise _RefusedGlobal(f"{module}.{name}")
        return super().find_class(module, name)  # pragma: no cover - the allowlist is empty


class _RefusedGlobal(pickle.UnpicklingError):
    pass


def _check_depth(data: object, path: str, limit: int = MAX_DEPTH) -> None:
    """Refuse containers nested deeper than `limit` (iteratively: no recursion to exhaust).

    A pickle may share one container from many places or hold a cycle; a container is walked
    again only when reached deeper than before, so the walk is at most `limit` x the containers,
    and a cycle is refused as nesting without end.
    """
    deepest: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        obj, depth = stack.pop()
        if not isinstance(obj, _CONTAINERS):
            continue
        if depth > limit:
            raise TraceError(f"{path}: nested deeper than {limit} levels: not a flight-recorder "
                             "dump (a real one nests 5)")
        if deepest.get(id(obj), 0) >= depth:
            continue
        deepest[id(obj)] = depth
        if isinstance(obj, dict):
            stack.extend((key, depth + 1) for key in obj)
            stack.extend((value, depth + 1) for value in obj.values())
        else:
            stack.extend((item, depth + 1) for item in obj)


def load_dump(raw: bytes, path: str) -> Any:
    """The dump object of a file's bytes, JSON or pickle (told apart by content), checked for
    depth; `TraceError` naming `path` when it is neither, damaged, or refused."""
    if not raw.strip():
        raise TraceError(f"{path}: empty file, not a flight-recorder dump")
    head = raw.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            data = json.loads(raw)
        except RecursionError as exc:
            raise TraceError(f"{path}: JSON nested too deeply: not a flight-recorder dump") \
                from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise TraceError(f"{path}: not valid JSON ({exc})") from exc
        _check_depth(data, path)
        return data
    if raw[:1] != b"\x80":
        raise TraceError(f"{path}: not a flight-recorder dump (neither a pickle nor JSON)")
    try:
        data = _RefusingUnpickler(io.BytesIO(raw)).load()
    except _RefusedGlobal as exc:
        raise TraceError(f"{path}: refused to unpickle: it asks for {exc}, and a "
                         "flight-recorder dump holds plain data only") from exc
    # A damaged pickle raises almost any exception type (pickle's documentation says so); every
    # one of them means the same thing here: the file is not a readable dump.
    except Exception as exc:
        raise TraceError(f"{path}: unreadable pickle, truncated or damaged "
                         f"({type(exc).__name__}: {exc})") from exc
    _check_depth(data, path)
    return data
