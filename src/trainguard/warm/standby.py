"""A standby interpreter: imports torch and a script's imports, then runs one rank.

    python .../trainguard/warm/standby.py --dir WARM --key KEY --lease LEASE --script S.py
    python -m trainguard.warm.standby ...          (the same, when trainguard is importable)

1. Imports torch (when installed) and the script's top-level imports (:mod:`.imports`) that
   resolve outside the script's folder, with the heavy lazy imports of those packages
   (:data:`.imports.LAZY_IMPORTS`), then the library modules an earlier rank with the same
   key had loaded by its first step (``WARM/KEY.imports``, :mod:`.loaded`), when listed.
   A failing import is logged (stderr, which the launcher sends to ``WARM/KEY.PID.log``) and
   ignored: the rank imports it again and fails as it would cold. Side effects: whatever
   those modules do at import (threads, files, signal handlers) happens before the fork,
   once, in the standby; the script's own modules (its folder) are not imported, so an edited
   helper module is never run stale.
2. Listens on ``WARM/KEY.PID.sock`` and writes ``WARM/KEY.PID.ready``; an adopter claims it by
   renaming the marker (one adopter wins), then connects.
3. Reads one assignment, forks: the child calls ``setsid``, is SIGKILLed if the standby dies,
   replaces ``os.environ``, ``cwd``, ``sys.argv``, ``sys.path[0]``, sends fd 1 and 2 to the
   output, restores the signal dispositions a fresh interpreter has, and runs the script as
   ``__main__``; its exit code is a cold ``python script.py``'s. Local rank 0 records, a few
   seconds in and again later, the library modules it has loaded (for a script without the
   SDK, which records them at its first step).
4. Sends the child's pid, then its wait status; SIGKILLs the child's group if the adopter's
   socket closes first. Exits when the lease file is stale, the warm directory is gone, or
   after ``--idle-s`` without an assignment.

Standard library only (torch aside): it starts in the script's interpreter, which need not
have trainguard's dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: find trainguard beside this file, last on path
    _COLD_PATH = list(sys.path[1:])
    # Not this folder first (its module names must not shadow the script's imports).
    sys.path[:] = [*_COLD_PATH, str(Path(__file__).resolve().parents[2])]
else:
    _COLD_PATH = list(sys.path[1:])

from trainguard.warm.imports import top_level_imports, with_lazy
from trainguard.warm.loaded import names_path, read_names, record_later
from trainguard.warm.protocol import (
    MAX_LINE,
    Assignment,
    ProtocolError,
    decode,
    encode,
    parse_assignment,
    socket_path,
)

LEASE_TIMEOUT_S = 15.0
IDLE_S = 6 * 3600.0
ASSIGN_TIMEOUT_S = 10.0


def _log(msg: str) -> None:
    with contextlib.suppress(OSError):
        sys.stderr.write(f"standby {os.getpid()}: {msg}\n")
        sys.stderr.flush()


def prewarm(script: str | None, torch: bool = True) -> list[str]:
    """Import torch and the script's top-level imports; returns the names that failed."""
    names: list[str] = ["torch"] if torch else []
    script_dir: Path | None = None
    if script is not None:
        script_dir = Path(script).resolve().parent
        with contextlib.suppress(OSError):
            names += top_level_imports(Path(script).read_bytes())
    names = list(with_lazy(names))
    import importlib
    import importlib.util
    failed = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name.split(".")[0])
            if spec is None:
                continue
            locations = list(spec.submodule_search_locations or [])
            origin = spec.origin or (locations[0] if locations else None)
            if script_dir is not None and origin and Path(origin).resolve().is_relative_to(
                    script_dir):
                continue  # the script's own modules: imported fresh by the rank
            importlib.import_module(name)
        except BaseException as exc:
            failed.append(name)
            _log(f"import {name} failed (the rank will import it again): {exc!r}")
    return failed


def prewarm_loaded(warm: Path, key: str) -> tuple[int, list[str]]:
    """Import the modules an earlier rank with this key had loaded by its first step
    (``WARM/KEY.imports``, :mod:`.loaded`): how many names were read, and those that failed.
    No file yet (the first attempt has not reached a step): nothing to do."""
    try:
        names = read_names(names_path(warm, key))
    except (OSError, ValueError) as exc:
        _log(f"cannot read the loaded-modules list: {exc!r}")
        return 0, []
    import importlib
    failed = []
    for name in names:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException as exc:
            failed.append(name)
            if len(failed) <= 20:
                _log(f"import {name} (loaded by an earlier rank) failed: {exc!r}")
    if len(failed) > 20:
        _log(f"{len(failed) - 20} more imports of the loaded-modules list failed")
    return len(names), failed


def late_prewarm(warm: Path, key: str, ready: Path, starting: Path) -> bool:
    """The loaded-modules list appeared after this standby started (the first attempt's
    ranks reached their first step): import it now, unclaimable meanwhile (the ready marker
    is renamed to the starting one, which still counts the standby as pending). False when
    an adopter claimed the standby first (it is served as it is)."""
    try:
        os.rename(ready, starting)
    except OSError:
        return False
    t0 = time.time()
    try:
        n, failed = prewarm_loaded(warm, key)
        if n:
            _log(f"imported {n - len(failed)} of {n} modules earlier ranks had loaded "
                 f"(listed after the start) in {time.time() - t0:.2f} s")
    finally:
        with contextlib.suppress(OSError):
            os.rename(starting, ready)
    return True


def lease_stale(lease: Path, timeout_s: float, now: float, started: float) -> bool:
    """The lease was not touched for ``timeout_s`` (a missing lease: ``timeout_s`` after the
    standby started)."""
    try:
        mtime = lease.stat().st_mtime
    except OSError:
        return now - started > timeout_s
    return now - mtime > timeout_s


def _prctl_pdeathsig() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER, as a cold rank (recover.local)


def _fresh_signals() -> None:
    """The dispositions a new Python process starts with."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _exit_code(code: Any) -> int:
    """``SystemExit.code`` as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def run_rank(job: Assignment, started_fd: int, warm: Path | None = None) -> int:
    """In the forked child: become the rank and run its script; returns the exit code.
    ``started_fd`` is closed once the child leads its own session. With ``warm``, local rank
    0 records the modules it has loaded for later standbys (:func:`.loaded.record_later`)."""
    os.setsid()
    _prctl_pdeathsig()
    os.close(started_fd)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    fd = os.open(job.output, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
    os.environ.clear()
    os.environ.update(job.env)
    os.chdir(job.cwd)
    _fresh_signals()
    is_module = job.argv[0] == "-m"
    target = job.argv[1] if is_module else job.argv[0]
    first = os.getcwd() if is_module else str(Path(target).resolve().parent)
    sys.path[:] = [first, *_COLD_PATH]
    sys.argv[:] = list(job.argv[1:] if is_module else job.argv)
    import runpy
    if warm is not None and os.environ.get("LOCAL_RANK", "0") == "0":
        record_later(warm)
    try:
        if is_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as a cold interpreter: killed by SIGINT
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _read_line(conn: socket.socket, timeout_s: float) -> bytes:
    conn.settimeout(timeout_s)
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ProtocolError("the adopter closed the socket before assigning")
        data += chunk
        if len(data) > MAX_LINE:
            raise ProtocolError("assignment too long")
    return data.split(b"\n", 1)[0]


def supervise(conn: socket.socket, child: int) -> None:
    """Report the child's pid, then its wait status; kill its group if the adopter goes."""
    conn.setblocking(True)
    with contextlib.suppress(OSError):
        conn.sendall(encode({"t": "pid", "pid": child}))
    pidfd = os.pidfd_open(child)
    try:
        while True:
            ready, _, _ = select.select([conn.fileno(), pidfd], [], [])
            if pidfd in ready:
                _, status = os.waitpid(child, 0)
                with contextlib.suppress(OSError):
                    conn.sendall(encode({"t": "exit", "status": status}))
                return
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if not data:  # the adopter died: nothing may run on without it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child, signal.SIGKILL)
                os.waitpid(child, 0)
                return
    finally:
        os.close(pidfd)


def serve(args: argparse.Namespace) -> int:
    warm = Path(args.dir)
    stem = warm / f"{args.key}.{os.getpid()}"
    sock_path, ready = Path(f"{stem}.sock"), Path(f"{stem}.ready")
    starting = Path(f"{stem}.starting")  # written by the starter: counts us while we import
    started = time.time()
    prewarm(args.script, torch=not args.no_torch)  # -m: a module's imports are not read
    t0 = time.time()
    n, failed = prewarm_loaded(warm, args.key)
    loaded = n > 0
    if n:
        _log(f"imported {n - len(failed)} of {n} modules earlier ranks had loaded "
             f"in {time.time() - t0:.2f} s")
    with contextlib.suppress(OSError):
        threads = len(os.listdir("/proc/self/task"))
        if threads > 1:  # an import started threads: the forked rank has none of them
            _log(f"{threads} threads before the fork (the rank gets only the main one)")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(warm, os.O_PATH | os.O_DIRECTORY)
    try:
        listener.bind(socket_path(dir_fd, sock_path.name))
        os.chmod(sock_path, 0o600)
        listener.listen(1)
        ready.write_text(f"{time.time() - started:.3f}\n")
        with contextlib.suppress(OSError):
            starting.unlink()
        _log(f"ready in {time.time() - started:.2f} s")
        while True:
            readable, _, _ = select.select([listener], [], [], args.check_s)
            if readable:
                conn, _ = listener.accept()
                if _peer_uid(conn) != os.geteuid():  # the dir is 0700; belt and braces
                    conn.close()
                    continue
                break
            if not loaded and names_path(warm, args.key).exists():
                loaded = True
                late_prewarm(warm, args.key, ready, starting)
            now = time.time()
            if not warm.is_dir():
                _log("warm directory removed: exiting")
                return 0
            if lease_stale(Path(args.lease), args.lease_timeout_s, now, started):
                _log("lease stale: exiting")
                return 0
            if now - started > args.idle_s:
                _log("idle limit reached: exiting")
                return 0
    finally:
        listener.close()
        os.close(dir_fd)
        for path in (sock_path, ready, starting):
            with contextlib.suppress(OSError):
                path.unlink()
    with conn:
        try:
            job = parse_assignment(decode(_read_line(conn, ASSIGN_TIMEOUT_S)))
        except (ProtocolError, OSError) as exc:
            _log(f"bad assignment: {exc}")
            with contextlib.suppress(OSError):
                conn.sendall(encode({"t": "error", "why": str(exc)}))
            return 1
        # The pid goes out only once the child leads its own session (as Popen returns after
        # start_new_session's setsid): a killpg on it then always reaches the rank.
        started_r, started_w = os.pipe()
        child = os.fork()
        if child == 0:
            conn.close()
            os.close(started_r)
            return run_rank(job, started_w, warm)  # the caller exits as a cold one would
        os.close(started_w)
        os.read(started_r, 1)  # end of file: setsid done (or the child died)
        os.close(started_r)
        supervise(conn, child)
    return 0


def _peer_uid(conn: socket.socket) -> int:
    import struct
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[2])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="standby", description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--lease", required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--script")
    target.add_argument("--module")
    p.add_argument("--lease-timeout-s", type=float, default=LEASE_TIMEOUT_S)
    p.add_argument("--idle-s", type=float, default=IDLE_S)
    p.add_argument("--check-s", type=float, default=0.5)
    p.add_argument("--no-torch", action="store_true", help="do not pre-import torch (tests)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
