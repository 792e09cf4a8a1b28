"""What a standby and its adopter agree on: the start-up environment rule, the standby's key,
and the messages on the Unix socket (one JSON object per line).

1. adopter -> standby: ``{"t": "assign", "argv", "env", "cwd", "output"}`` (once);
2. standby -> adopter: ``{"t": "pid", "pid"}`` once the rank's process is forked;
3. standby -> adopter: ``{"t": "exit", "status"}``: the raw wait status of that process
   (``os.waitstatus_to_exitcode`` gives the ``subprocess`` return code), then the standby exits;
   or ``{"t": "error", "why"}`` instead of 2 when the assignment cannot run.

Start-up environment rule (:func:`startup_env`): a variable is *start-up* when the interpreter,
the dynamic loader or an import of torch and its libraries may read it before the script's
first line runs. A standby started with one set of start-up variables is used only for a rank
whose start-up variables are exactly equal (same names, same values); everything else in the
rank's environment is applied when the rank starts (``os.environ`` is replaced).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STARTUP_PREFIXES = ("PYTHON", "LD_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "BLIS_",
                    "NUMEXPR_", "VECLIB_", "CUDA_", "CUBLAS", "CUDNN_", "NVIDIA_", "NCCL_",
                    "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_", "HIP_", "ROCM_",
                    "HSA_", "MALLOC_", "GLIBC_", "XLA_", "TF_", "JAX_", "TRITON_", "LC_")
"""Variables read at interpreter start (PYTHON*), by the loader (LD_*), by the math and GPU
libraries at load time or by torch's import. NCCL_ and TORCH_ are included although most are
read later: a variable read at import time by some version is enough to need it. Not
TORCHELASTIC_*: the supervisor changes them every attempt, and torch reads them at run time."""

STARTUP_NAMES = frozenset({"HOME", "LANG", "LANGUAGE", "TMPDIR", "PATH", "VIRTUAL_ENV",
                           "CONDA_PREFIX", "CONDA_DEFAULT_ENV"})
"""Exact names: HOME (the user site directory on sys.path), the locale (stdio encoding),
TMPDIR (temp files libraries create at import), PATH and the environment markers (libraries
that locate compilers or CUDA through them at import)."""

MAX_LINE = 4 * 1024 * 1024
"""Longest message accepted (an environment of a few thousand variables fits)."""


def is_startup(name: str) -> bool:
    return name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES)


def startup_env(env: Mapping[str, str]) -> dict[str, str]:
    """The start-up variables of ``env`` (pure)."""
    return {k: v for k, v in env.items() if is_startup(k)}


def compatible(standby_env: Mapping[str, str], rank_env: Mapping[str, str]) -> bool:
    """A standby started with ``standby_env`` may run a rank with ``rank_env``."""
    return startup_env(standby_env) == startup_env(rank_env)


def standby_key(python: str, target: str, mtime_ns: int, env: Mapping[str, str]) -> str:
    """What a standby is interchangeable by: the interpreter, the script (path and mtime, or
    ``-m module``) and the start-up environment; a short hex digest (a file-name part)."""
    h = hashlib.sha256()
    for part in (python, target, str(mtime_ns)):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    for name, value in sorted(startup_env(env).items()):
        h.update(f"{name}={value}".encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Assignment:
    """One rank for a standby."""

    argv: tuple[str, ...]
    """``sys.argv`` of the rank: the script path (or ``-m``'s module) and its arguments."""
    env: Mapping[str, str]
    cwd: str
    output: str
    """The rank's log file (appended; never through a symlink)."""

    def to_json(self) -> dict[str, Any]:
        return {"t": "assign", "argv": list(self.argv), "env": dict(self.env), "cwd": self.cwd,
                "output": self.output}


class ProtocolError(ValueError):
    """A message that is not what the protocol says (stays inside the warm package)."""


def socket_path(dir_fd: int, name: str) -> str:
    """A short path to ``name`` in the directory open as ``dir_fd``: a Unix socket's path is
    limited to 107 bytes, and a run's warm directory can be deeper than that."""
    return f"/proc/self/fd/{dir_fd}/{name}"


def encode(msg: Mapping[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode("utf-8", "surrogateescape") + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(line.decode("utf-8", "surrogateescape"))
    except ValueError as exc:
        raise ProtocolError(f"not a JSON message: {exc}") from exc
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise ProtocolError("a message must be a JSON object with a string 't'")
    return msg


def parse_assignment(msg: Mapping[str, Any]) -> Assignment:
    """``msg`` as an :class:`Assignment`; :class:`ProtocolError` naming the bad field."""
    if msg.get("t") != "assign":
        raise ProtocolError(f"expected an assignment, got {msg.get('t')!r}")
    argv, env = msg.get("argv"), msg.get("env")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ProtocolError("argv must be a non-empty list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise ProtocolError("env must map strings to strings")
    for name in ("cwd", "output"):
        if not isinstance(msg.get(name), str) or not msg[name]:
            raise ProtocolError(f"{name} must be a non-empty string")
    return Assignment(tuple(argv), dict(env), msg["cwd"], msg["output"])


def parse_int(msg: Mapping[str, Any], name: str) -> int:
    value = msg.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{name} must be an integer")
    return value


__all__ = [
    "MAX_LINE",
    "STARTUP_NAMES",
    "STARTUP_PREFIXES",
    "Assignment",
    "ProtocolError",
    "compatible",
    "decode",
    "encode",
    "is_startup",
    "parse_assignment",
    "parse_int", "socket_path",
    "standby_key",
    "startup_env",
]
