"""Which globals a checkpoint's pickled structure may name when it is loaded.

Unpickling calls whatever the pickle names (``os.system``, ``builtins.exec``, any class), so a
checkpoint from somewhere else could run code on load. Like ``torch.load(weights_only=True)``,
a load is restricted by default: tensors come back through the engine's own references, dicts,
lists, tuples, strings, numbers, booleans, None and bytes need no global at all, and the only
globals allowed are the exact ``(module, name)`` pairs below: no module wildcards, no dotted
names. Anything else fails with a `CheckpointError` naming the global; ``trusted=True`` lifts
the restriction for checkpoints whose origin the caller trusts.

>>> check_global("collections", "OrderedDict", frozenset())
>>> check_global("os", "system", frozenset())
Traceback (most recent call last):
...
trainguard.errors.CheckpointError: checkpoint state needs the global 'os.system', which a \
restricted load refuses (allowed: tensors, numpy arrays, builtin containers and scalars, and a \
few exact torch/collections names); pass trusted=True to load it if you trust where this \
checkpoint comes from
"""

from __future__ import annotations

from types import ModuleType

from trainguard.errors import CheckpointError

__all__ = ["SAFE_GLOBALS", "check_global", "torch_globals"]

SAFE_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("collections", "OrderedDict"),
    ("builtins", "complex"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "bytearray"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch.serialization", "_get_layout"),
    # numpy arrays and scalars (numpy 2 spells the module _core, numpy 1 core): each builds an
    # array or scalar from bytes and a dtype; an object array's items are unpickled under the
    # same restriction.
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
})
"""Globals a restricted load allows besides `torch_globals` (the torch dtypes)."""


def torch_globals(torch: ModuleType) -> frozenset[tuple[str, str]]:
    """``("torch", name)`` of every dtype torch exports (a pickled ``torch.float16`` is the
    global ``torch.float16``): each an exact name, listed from torch itself."""
    return frozenset(("torch", name) for name, value in vars(torch).items()
                     if isinstance(value, torch.dtype))


def check_global(module: str, name: str, extra: frozenset[tuple[str, str]]) -> None:
    """Nothing when a restricted load may resolve ``module.name``, else `CheckpointError`
    naming it."""
    if (module, name) in SAFE_GLOBALS or (module, name) in extra:
        return
    qualified = f"{module}.{name}"
    raise CheckpointError(
        f"checkpoint state needs the global {qualified!r:.120}, which a restricted load refuses "
        "(allowed: tensors, numpy arrays, builtin containers and scalars, and a few exact "
        "torch/collections names); pass trusted=True to load it if you trust where this "
        "checkpoint comes from")
