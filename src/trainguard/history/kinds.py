"""A fault's kind from its record's type fields: the levels of the type joined with " / ".

A type field may hold a string (one level), an object whose values are the levels in key order
(InfiniteHBD's ``{"Level": ..., "Class": ..., "Desc": ...}``) or a list of levels; several type
fields give one level each, in the order given. Empty levels are left out; spellings are kept
as the source has them.

    >>> kind_of({"fault_type": {"Level": "Hardware Failure", "Class": "GPU",
    ...                         "Desc": "GPU xid Error"}}, ("fault_type",))
    'Hardware Failure / GPU / GPU xid Error'
    >>> kind_of({"Hardware": "", "Software": "Kernel"}, ("Hardware", "Software"), labels=True)
    'Software / Kernel'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

UNKNOWN_KIND = "unknown"
"""The kind of a fault whose record names no type."""

SEPARATOR = " / "
FLAGS = frozenset({"1", "x", "y", "yes", "true"})
"""Values that mark a category column as "this one" (with ``labels``)."""


def _levels(value: object) -> list[str]:
    if isinstance(value, Mapping):
        return [level for item in value.values() for level in _levels(item)]
    if isinstance(value, list | tuple):
        return [level for item in value for level in _levels(item)]
    if value is None or isinstance(value, bool):
        return []
    text = str(value).strip()
    return [text] if text else []


def _labelled(field: str, value: object) -> list[str]:
    if value is True:
        return [field]
    levels = _levels(value)
    if not levels:
        return []
    if len(levels) == 1 and levels[0].casefold() in FLAGS | {field.strip().casefold()}:
        return [field]
    return [field, *levels]


def type_levels(values: Mapping[str, object], type_fields: Sequence[str], *,
                labels: bool = False) -> tuple[str, ...]:
    """The levels of the record's type, top first; empty when its type fields are all empty or
    missing.

    ``labels``: each non-empty field adds its own name before its value (a flag value, or the
    field's own name, adds the name alone), for sources with one column per category.
    """
    parts: list[str] = []
    for field in type_fields:
        value = values.get(field)
        parts.extend(_labelled(field, value) if labels else _levels(value))
    return tuple(parts)


def kind_of(values: Mapping[str, object], type_fields: Sequence[str], *,
            labels: bool = False) -> str | None:
    """The kind the record's ``type_fields`` give (levels joined " / "); None when none."""
    levels = type_levels(values, type_fields, labels=labels)
    return SEPARATOR.join(levels) if levels else None


def top_level(kind: str) -> str:
    """The top level of a kind: "Hardware Failure / GPU / X" -> "Hardware Failure" (a kind
    without " / " is its own top level)."""
    return kind.split(SEPARATOR, 1)[0].strip() or kind


__all__ = ["FLAGS", "SEPARATOR", "UNKNOWN_KIND", "kind_of", "top_level", "type_levels"]
