"""Slurm hostlist expressions: ``node[1-3,7]`` <-> ``("node1", "node2", "node3", "node7")``.

Pure functions; no Slurm installation needed.

    >>> expand_hostlist("gpu[001-003],login1")
    ('gpu001', 'gpu002', 'gpu003', 'login1')
    >>> compress_hostlist(["node1", "node2", "node3", "node7"])
    'node[1-3,7]'

Grammar (what ``scontrol show hostnames`` accepts, plus suffixes after a bracket):

- names are separated by commas or whitespace outside brackets; empty items are ignored;
- a bracket holds comma-separated numbers or ``lo-hi`` ranges; a range is zero-padded to the width
  of ``lo`` as written (``[08-11]`` -> 08 09 10 11; ``[8-11]`` -> 8 9 10 11), as Slurm does;
- several brackets in one name expand as a cartesian product, the first bracket varying slowest
  (``rack[1-2]-n[01-02]`` -> rack1-n01 rack1-n02 rack2-n01 rack2-n02, Slurm's order).

Slurm 22.05 rejects text after the last bracket (``n[1-2]s``); this module expands it anyway, but
:func:`compress_hostlist` never produces it, so its output is always valid for Slurm.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

from trainguard.errors import ConfigError

MAX_NAMES = 100_000
"""The most names one expression may expand to (a typo like ``[1-1000000]`` is refused)."""

_SEPARATORS = frozenset(", \t\r\n")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$", re.DOTALL)
_FORBIDDEN_IN_NAME = re.compile(r"[\[\],\s]")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?", re.ASCII)


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """Every host name in ``expr``, in Slurm's order; ``""`` -> ``()``.

    Raises :class:`ConfigError` naming ``expr`` for unbalanced brackets, reversed or non-numeric
    ranges, and expressions over :data:`MAX_NAMES` names.
    """
    names: list[str] = []
    for item in _split_items(expr):
        parts = _parse_item(item, expr)
        count = math.prod(len(p) for p in parts)
        if len(names) + count > MAX_NAMES:
            raise ConfigError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
        names.extend("".join(combo) for combo in itertools.product(*parts))
    return tuple(names)


def compress_hostlist(names: Iterable[str]) -> str:
    """A compact Slurm expression for ``names`` that expands back to exactly ``names``.

    Order and duplicates are kept: neighbours that share a prefix and end in numbers are merged
    into one bracket (``node1 node2 node3 node7`` -> ``node[1-3,7]``); zero padding is kept
    (``gpu001 gpu002`` -> ``gpu[001-002]``). Sort the names first for the canonical form.
    """
    # (prefix, its trailing numbers as written); no numbers: a name kept verbatim
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        name = name.strip()
        if not name or _FORBIDDEN_IN_NAME.search(name):
            raise ConfigError(f"host name {name!r} cannot appear in a hostlist")
        match = _TRAILING_NUMBER.match(name)
        if match is None:
            groups.append((name, []))
            continue
        prefix, digits = match.group(1), match.group(2)
        if groups and groups[-1][1] and groups[-1][0] == prefix:
            groups[-1][1].append(digits)
        else:
            groups.append((prefix, [digits]))
    return ",".join(
        prefix if not numbers else _bracket(prefix, numbers) for prefix, numbers in groups
    )


def _bracket(prefix: str, numbers: list[str]) -> str:
    if len(numbers) == 1:
        return prefix + numbers[0]
    return f"{prefix}[{','.join(_runs(numbers))}]"


def _runs(numbers: list[str]) -> list[str]:
    """``["1","2","3","7"]`` -> ``["1-3", "7"]``; a run continues while the next number is one
    more and is written at the run's padding width (that of its first number, as Slurm reads it)."""
    runs: list[str] = []
    start = 0
    for i in range(1, len(numbers) + 1):
        if i < len(numbers):
            width = len(numbers[start])
            value = int(numbers[i])
            if value == int(numbers[i - 1]) + 1 and f"{value:0{width}d}" == numbers[i]:
                continue
        lo, hi = numbers[start], numbers[i - 1]
        runs.append(lo if start == i - 1 else f"{lo}-{hi}")
        start = i
    return runs


def _split_items(expr: str) -> list[str]:
    """Split at commas/whitespace outside brackets; check bracket balance on the way."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            if depth:
                raise ConfigError(f"hostlist {expr!r}: nested '['")
            depth = 1
        elif ch == "]":
            if not depth:
                raise ConfigError(f"hostlist {expr!r}: ']' without '['")
            depth = 0
        elif depth == 0 and ch in _SEPARATORS:
            if current:
                items.append("".join(current))
                current = []
            continue
        current.append(ch)
    if depth:
        raise ConfigError(f"hostlist {expr!r}: unclosed '['")
    if current:
        items.append("".join(current))
    return items


def _parse_item(item: str, expr: str) -> list[list[str]]:
    """``rack[1-2]-n[01-02]`` -> ``[["rack"], ["1", "2"], ["-n"], ["01", "02"]]``."""
    parts: list[list[str]] = []
    pos = 0
    while pos < len(item):
        opening = item.find("[", pos)
        if opening < 0:
            parts.append([item[pos:]])
            break
        if opening > pos:
            parts.append([item[pos:opening]])
        closing = item.index("]", opening)  # _split_items checked the balance
        parts.append(_expand_bracket(item[opening + 1 : closing], expr))
        pos = closing + 1
    return parts


def _expand_bracket(inside: str, expr: str) -> list[str]:
    values: list[str] = []
    for token in inside.split(","):
        token = "".join(token.split())  # whitespace inside a bracket is ignored
        match = _RANGE.fullmatch(token)
        if match is None:
            raise ConfigError(f"hostlist {expr!r}: invalid range {token!r}")
        lo, hi = match.group(1), match.group(2)
        if hi is None:
            values.append(lo)
            continue
        first, last = int(lo), int(hi)
        if first > last:
            raise ConfigError(f"hostlist {expr!r}: reversed range {token!r}")
        if len(values) + last - first + 1 > MAX_NAMES:
            raise ConfigError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
        width = len(lo)
        values.extend(f"{n:0{width}d}" for n in range(first, last + 1))
    return values


__all__ = ["MAX_NAMES", "compress_hostlist", "expand_hostlist"]
