"""The modules a script imports at its top level, found with :mod:`ast` (nothing executed).

A standby imports these before its rank is assigned, so the rank does not pay for them. Only
statements that run when the module runs count: imports at the top level and inside top-level
``if``/``try``/``with`` blocks; imports inside functions and classes are left to the rank.

    >>> top_level_imports("import torch\\nfrom numpy import linalg\\nfrom . import x\\n")
    ('torch', 'numpy')
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

LAZY_IMPORTS: dict[str, tuple[str, ...]] = {"torch": ("torch._dynamo",)}
"""Heavy modules a package imports lazily on paths nearly every training script takes: torch
imports ``torch._dynamo`` (about 800 modules with sympy: 1-3 s) on the first
``DistributedDataParallel(...)``, optimizer step or ``use_deterministic_algorithms``. A
standby imports them with the package, so a script without the SDK (which records what its
ranks loaded, :mod:`.loaded`) does not pay for them on its first warm restart."""


def _statements(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _statements(node.body)
            yield from _statements(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _statements(node.body)
            for handler in node.handlers:
                yield from _statements(handler.body)
            yield from _statements(node.orelse)
            yield from _statements(node.finalbody)
        elif isinstance(node, ast.With):
            yield from _statements(node.body)


def top_level_imports(source: str | bytes) -> tuple[str, ...]:
    """Absolute module names imported at the top level, in order, each once (``__future__``
    and relative imports left out); empty when the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    found: dict[str, None] = {}
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.name] = None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module != "__future__":
            found[node.module] = None
    return tuple(found)


def with_lazy(names: Sequence[str], lazy: dict[str, tuple[str, ...]] | None = None
              ) -> tuple[str, ...]:
    """``names`` followed by the lazy imports (:data:`LAZY_IMPORTS`) of their top-level
    packages, each once.

    >>> with_lazy(["numpy", "torch.nn", "torch"])
    ('numpy', 'torch.nn', 'torch', 'torch._dynamo')
    """
    table = LAZY_IMPORTS if lazy is None else lazy
    found = dict.fromkeys(names)
    for name in names:
        found.update(dict.fromkeys(table.get(name.split(".")[0], ())))
    return tuple(found)


__all__ = ["LAZY_IMPORTS", "top_level_imports", "with_lazy"]
