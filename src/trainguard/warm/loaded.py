"""The modules a rank had loaded by its first training step, kept for the next standbys.

A script often imports much of its weight after start-up (``torch.use_deterministic_algorithms``
imports ``torch._dynamo`` and ``torch._inductor``): a standby that only imports the script's
top-level imports leaves those to the rank. So the first step of local rank 0 writes the names
in ``sys.modules`` that came from the standard library or site-packages to
``WARM/KEY.imports`` (KEY: the standby key, :func:`process_key`); a standby with that key
imports them too (:func:`read_names`) before it reports ready. A script without the SDK has
no first-step hook: local rank 0 of a warm restart records them from a thread instead
(:func:`record_later`), so its later restarts get them.

Kept: modules whose file lies under the interpreter's library folders (stdlib, site-packages,
the user site). Left out: ``__main__``, modules without a file (built-ins and extension
submodules come with their parent), anything under the script's folder or elsewhere (the
script's own modules, editable checkouts, test helpers: the standby never runs code that may
be edited between attempts), and trainguard's warm machinery itself.

Standard library only: the standby imports this in the script's interpreter.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from trainguard.warm.protocol import standby_key

SUFFIX = ".imports"
MAX_NAMES = 20000
"""More names than any real program loads; a longer file is cut (it is only a hint)."""
SKIP_NAMES = frozenset({"__main__", "__mp_main__"})
SKIP_PREFIXES = ("trainguard.warm.standby",)


def library_roots() -> tuple[str, ...]:
    """The folders importable library code lives in: stdlib and site-packages of this
    interpreter (as written and symlinks resolved), each ending in a separator."""
    paths: set[str] = set()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(sysconfig.get_paths()[name])
    with contextlib.suppress(AttributeError):
        paths.update(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        user = site.getusersitepackages()
        if isinstance(user, str):
            paths.add(user)
    out = set()
    for p in paths:
        for q in (os.path.abspath(p), os.path.realpath(p)):
            out.add(q.rstrip(os.sep) + os.sep)
    return tuple(sorted(out))


def _file_of(mod: object) -> str | None:
    path = getattr(mod, "__file__", None)
    if isinstance(path, str):
        return path
    locations = getattr(mod, "__path__", None)  # a namespace package: its first folder
    with contextlib.suppress(TypeError):
        for loc in locations or ():
            if isinstance(loc, str):
                return loc + os.sep
    return None


def select_names(modules: Mapping[str, ModuleType | None], roots: Sequence[str],
                 exclude_dirs: Sequence[str]) -> list[str]:
    """The names of ``modules`` (in their order) a standby should import (pure): a file under
    one of ``roots`` and under none of ``exclude_dirs`` (each ending in a separator)."""
    roots_t, excl_t = tuple(roots), tuple(exclude_dirs)
    out = []
    for name, mod in list(modules.items()):
        if mod is None or not name or name in SKIP_NAMES or name.startswith(SKIP_PREFIXES):
            continue
        path = _file_of(mod)
        if path is None or not os.path.isabs(path):
            continue
        if path.startswith(roots_t) and not (excl_t and path.startswith(excl_t)):
            out.append(name)
    return out


def script_dirs(main: object) -> list[str]:
    """The folder of ``__main__``'s file (as written and resolved), or none (``-c``, REPL)."""
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return []
    folder = os.path.dirname(os.path.abspath(path))
    return sorted({d.rstrip(os.sep) + os.sep for d in (folder, os.path.realpath(folder))})


def process_env() -> dict[str, str]:
    """The environment this process started with (``/proc/self/environ``: what the script set
    in ``os.environ`` since is not in it); ``os.environ`` where it cannot be read."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    env = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def process_key() -> str | None:
    """This process's standby key, as the launcher computes it for a standby that could run
    it (:meth:`~trainguard.warm.pool.WarmCommand.key`), or None: not ``python script.py`` or
    ``python -m module``. A rank run in a standby finds its standby's key: the interpreter is
    the standby's ``argv[0]`` and its start-up environment is the standby's."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    python = sys.orig_argv[0] if sys.orig_argv else sys.executable
    if os.sep not in python:  # found on PATH, as the launcher resolved it
        python = shutil.which(python) or sys.executable
    elif not os.path.isabs(python):  # relative to the working directory it started in
        python = os.path.normpath(os.path.abspath(python))
    if spec is not None and getattr(spec, "name", None):
        module = str(spec.name)
        if module.endswith(".__main__"):
            module = module[: -len(".__main__")]
        return standby_key(python, f"-m {module}", 0, process_env())
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return None
    script = path if os.path.isabs(path) else os.path.abspath(path)
    try:
        mtime_ns = os.stat(script).st_mtime_ns
    except OSError:
        return None
    return standby_key(python, script, mtime_ns, process_env())


def names_path(warm_dir: Path, key: str) -> Path:
    return warm_dir / f"{key}{SUFFIX}"


def write_names(path: Path, names: Iterable[str]) -> None:
    """Write ``names`` one a line, atomically (a temp file renamed over ``path``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(f"{n}\n" for n in names))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def read_names(path: Path) -> list[str]:
    """The names in ``path`` (empty when it does not exist); lines that are not dotted Python
    identifiers are skipped (``-`` allowed: ``_sysconfigdata__linux_x86_64-linux-gnu``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines()[:MAX_NAMES]:
        name = line.strip()
        if name and all(p.replace("-", "_").isidentifier() for p in name.split(".")):
            out.append(name)
    return out


def record_loaded(warm_dir: Path) -> Path | None:
    """Write this process's library modules for the standbys of its key; the path written,
    or None when the process has no standby key. OSError goes to the caller."""
    key = process_key()
    if key is None:
        return None
    names = select_names(sys.modules, library_roots(),
                         script_dirs(sys.modules.get("__main__")))
    path = names_path(warm_dir, key)
    write_names(path, names)
    return path


RECORD_AFTER_S = (5.0, 30.0)
"""When a rank run in a standby records its modules (seconds after its start, each a pause
after the one before): by then a script has built its model and taken its first steps."""


def record_grown(warm_dir: Path) -> bool:
    """Write this process's library modules when they are more than the list holds (a rank
    without the SDK, or one that has loaded more since its first step); True when written.
    Never raises: a hint for later standbys is not worth failing a rank."""
    try:
        key = process_key()
        if key is None:
            return False
        names = select_names(sys.modules, library_roots(),
                             script_dirs(sys.modules.get("__main__")))
        path = names_path(warm_dir, key)
        if len(names) <= len(read_names(path)):
            return False
        write_names(path, names)
        return True
    except Exception:
        return False


def record_later(warm_dir: Path, delays: Sequence[float] = RECORD_AFTER_S,
                 sleep: Callable[[float], None] = time.sleep) -> threading.Thread:
    """Start a daemon thread that calls :func:`record_grown` after each pause in ``delays``
    (the rank's own work goes on; the thread dies with the process)."""
    def work() -> None:
        for pause in delays:
            sleep(pause)
            record_grown(warm_dir)

    thread = threading.Thread(target=work, name="trainguard-warm-record", daemon=True)
    thread.start()
    return thread


__all__ = ["RECORD_AFTER_S", "library_roots", "names_path", "process_env", "process_key",
           "read_names", "record_grown", "record_later", "record_loaded", "script_dirs",
           "select_names", "write_names"]
