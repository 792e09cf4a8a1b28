"""Write a JSON document so that a reader never sees half of it: run summaries, supervisor state,
diagnosis files.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "state.json"
    >>> write_json_atomic(path, {"attempt": 1})
    >>> path.read_text()
    '{\\n  "attempt": 1\\n}\\n'
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainguard.errors import LaunchError

__all__ = ["write_json_atomic"]


def write_json_atomic(path: Path, obj: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``obj`` as JSON in one rename: a reader never sees half a file.
    :class:`LaunchError` (one line) when it cannot be written."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    except OSError as exc:
        raise LaunchError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, allow_nan=False, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise LaunchError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise
