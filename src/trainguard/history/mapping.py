"""A mapping file: a source's fault types onto trainguard's failure taxonomy.

A TOML file of rules, tried in order; the first whose ``pattern`` matches a fault's kind (the
type levels joined with " / ") gives its category. Patterns are shell-style wildcards (``*``,
``?``, ``[...]``; ``[[]`` for a literal ``[``) matched against the whole kind, case ignored::

    [[map]]
    pattern = "Hardware Failure / GPU / GPU DBE*"
    category = "memory-ecc"

    [[map]]
    pattern = "Hardware Failure / GPU / *"
    category = "gpu"

A kind no rule matches keeps the top level of its type as its category ("Hardware Failure").
A category outside :data:`TAXONOMY`, a rule without a pattern, or any other key is a
:class:`~trainguard.errors.HistoryError` naming the file, the rule's number and its line.

    >>> m = parse_mapping('[[map]]\\npattern = "*dbe*"\\ncategory = "memory-ecc"\\n', "m.toml")
    >>> m.category_for("Hardware Failure / GPU / GPU DBE > Threshold"), m.category_for("NIC")
    ('memory-ecc', None)
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from trainguard.errors import HistoryError

TAXONOMY = ("gpu", "memory-ecc", "nvlink", "network", "power-board", "software", "unknown")
"""The categories a mapping may give: GPU, memory/ECC, NVLink, network/NIC/cable,
power/fan/board, software, unknown."""

_RULE_HEADER = re.compile(r"^\s*\[\[\s*(?:map|\"map\"|'map')\s*\]\]")
_RULE_KEYS = frozenset({"pattern", "category"})


@dataclass(frozen=True, slots=True)
class TypeMapping:
    """Rules ``(pattern, category)`` in order; the first match wins (case ignored)."""

    rules: tuple[tuple[str, str], ...]
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False,
                                                   default=())

    def __post_init__(self) -> None:
        for number, (_, category) in enumerate(self.rules, start=1):
            if category not in TAXONOMY:
                raise HistoryError(f"mapping rule {number}: category {category!r} is not one of "
                                   + ", ".join(TAXONOMY))
        compiled = tuple(re.compile(fnmatch.translate(pattern.casefold()))
                         for pattern, _ in self.rules)
        object.__setattr__(self, "_compiled", compiled)

    def category_for(self, kind: str) -> str | None:
        """The category of the first rule matching ``kind``; None when no rule matches."""
        folded = kind.casefold()
        for regex, (_, category) in zip(self._compiled, self.rules, strict=True):
            if regex.match(folded):
                return category
        return None


def _rule_lines(text: str) -> list[int]:
    return [number for number, line in enumerate(text.splitlines(), start=1)
            if _RULE_HEADER.match(line)]


def parse_mapping(text: str, source: str) -> TypeMapping:
    """The rules of a mapping file's ``text`` (``source`` names it in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HistoryError(f"{source} is not valid TOML: {exc}") from exc
    extra = sorted(set(data) - {"map"})
    if extra:
        raise HistoryError(f"{source}: unknown key {extra[0]!r}: a mapping file holds only "
                           "[[map]] rules with a pattern and a category")
    rules = data.get("map", [])
    if not isinstance(rules, list) or not rules:
        raise HistoryError(f"{source}: no [[map]] rules (each: pattern = \"...\", "
                           "category = \"...\")")
    lines = _rule_lines(text)
    out: list[tuple[str, str]] = []
    for number, rule in enumerate(rules, start=1):
        where = f"{source}: rule {number}" + (f" (line {lines[number - 1]})"
                                              if number <= len(lines) else "")
        if not isinstance(rule, dict):
            raise HistoryError(f"{where}: a rule is a [[map]] table")
        unknown = sorted(set(rule) - _RULE_KEYS)
        if unknown:
            raise HistoryError(f"{where}: unknown key {unknown[0]!r} (a rule has a pattern and "
                               "a category)")
        pattern, category = rule.get("pattern"), rule.get("category")
        if not isinstance(pattern, str) or not pattern.strip():
            raise HistoryError(f"{where}: needs a pattern (a string such as \"Hardware Failure"
                               " / GPU / *\")")
        if not isinstance(category, str) or category not in TAXONOMY:
            raise HistoryError(f"{where}: category {category!r} is not one of "
                               + ", ".join(TAXONOMY))
        out.append((pattern.strip(), category))
    return TypeMapping(tuple(out))


def load_mapping(path: Path) -> TypeMapping:
    """The mapping file at ``path``; HistoryError naming the file (and rule line) when bad."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"cannot read mapping file {path}: "
                           f"{getattr(exc, 'strerror', None) or exc}") from exc
    return parse_mapping(text, str(path))


__all__ = ["TAXONOMY", "TypeMapping", "load_mapping", "parse_mapping"]
