"""Start, find and claim standby interpreters in a host's warm directory.

Files in the warm directory (mode 0700) per standby: ``KEY.PID.sock`` (its socket),
``KEY.PID.ready`` (it has imported and listens), ``KEY.PID.log`` (its own log). Claiming renames
the ready marker to ``KEY.PID.claimed``: of two adopters racing for one standby, one rename
wins. The adopter then connects, sends the assignment and waits for the rank's pid.

    cmd = parse_command(("/venv/bin/python", "train.py", "--lr", "3e-4"), workdir)
    start_standby(cmd, env, warm_dir, lease)            # in the background, for later
    proc = claim(cmd, env, warm_dir, Assignment(...))   # a WarmProc, or None: start cold
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from trainguard.warm.protocol import (
    MAX_LINE,
    Assignment,
    ProtocolError,
    decode,
    encode,
    parse_int,
    socket_path,
    standby_key,
    startup_env,
)

log = logging.getLogger(__name__)

STANDBY_FILE = Path(__file__).with_name("standby.py")
PID_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class WarmCommand:
    """A command a standby can run: ``python script.py ARGS`` or ``python -m module ARGS``."""

    python: str
    """The interpreter, as resolved (not through symlinks: a venv's python is its link)."""
    script: str | None
    """Absolute path of the script, or None for a module."""
    module: str | None
    args: tuple[str, ...]
    mtime_ns: int
    """The script's mtime (0 for a module): an edited script never runs in an old standby."""

    @property
    def argv(self) -> tuple[str, ...]:
        """``sys.argv`` as the interpreter would set it (``-m``: replaced by runpy)."""
        if self.script is not None:
            return (self.script, *self.args)
        return ("-m", str(self.module), *self.args)

    def key(self, env: dict[str, str]) -> str:
        target = self.script if self.script is not None else f"-m {self.module}"
        return standby_key(self.python, target, self.mtime_ns, env)


def parse_command(command: tuple[str, ...], program: str, workdir: Path) -> WarmCommand | None:
    """``command`` as a :class:`WarmCommand` (``program``: ``command[0]`` resolved), or None
    when a standby cannot run it: not a Python interpreter, or options before the script."""
    name = Path(program).name
    if not name.startswith("python") or len(command) < 2:
        return None
    if not os.path.isabs(program):
        # A relative interpreter (``.venv/bin/python``) runs from the ranks' working directory;
        # the standby starts in its warm directory, so it gets the absolute path (not through
        # the symlink: a venv's python is its link).
        program = os.path.normpath(os.path.join(workdir, program))
    if command[1] == "-m":
        if len(command) < 3 or not command[2] or command[2].startswith("-"):
            return None
        return WarmCommand(program, None, command[2], tuple(command[3:]), 0)
    if command[1].startswith("-"):
        return None
    script = Path(command[1]) if os.path.isabs(command[1]) else workdir / command[1]
    try:
        st = script.stat()
    except OSError:
        return None
    if not script.is_file():
        return None
    return WarmCommand(program, str(script), None, tuple(command[2:]), st.st_mtime_ns)


def start_standby(cmd: WarmCommand, env: dict[str, str], warm_dir: Path, lease: Path, *,
                  lease_timeout_s: float = 15.0, idle_s: float = 6 * 3600.0,
                  check_s: float = 0.5, torch: bool = True) -> int:
    """Start a standby for ``cmd`` (detached: its own session, not our child for long); returns
    its pid. ``env`` is the start-up environment it runs with (the rank's, as it will be)."""
    warm_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = cmd.key(env)
    target = ["--script", cmd.script] if cmd.script is not None else ["--module",
                                                                         str(cmd.module)]
    argv = [cmd.python, str(STANDBY_FILE), "--dir", str(warm_dir), "--key", key,
            "--lease", str(lease), "--lease-timeout-s", str(lease_timeout_s),
            "--idle-s", str(idle_s), "--check-s", str(check_s), *target,
            *([] if torch else ["--no-torch"])]
    log_path = warm_dir / f"{key}.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        # Double fork through a short-lived intermediate would detach fully; instead a thread
        # reaps it (our child until it exits), and its own session keeps terminals' signals out.
        proc = subprocess.Popen(argv, env=env, cwd=str(warm_dir), stdin=subprocess.DEVNULL,
                                stdout=fd, stderr=fd, start_new_session=True)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        (warm_dir / f"{key}.{proc.pid}.starting").touch()
    _reap_later(proc)
    return proc.pid


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    import threading
    threading.Thread(target=proc.wait, name=f"standby-{proc.pid}", daemon=True).start()


def ready_standbys(warm_dir: Path, key: str) -> list[Path]:
    """Ready markers of the standbys with ``key``, oldest first."""
    try:
        found = [p for p in warm_dir.iterdir() if p.name.startswith(key + ".")
                 and p.name.endswith(".ready")]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name)


def count_pending(warm_dir: Path, key: str) -> int:
    """Standbys with ``key`` that are ready or still importing (a log line per start is not
    a count: the socket and ready files are): ready ones plus live unclaimed pids."""
    n = 0
    try:
        names = [p.name for p in warm_dir.iterdir()]
    except OSError:
        return 0
    pids = {int(part) for name in names if name.startswith(key + ".")
            and name.endswith((".ready", ".starting"))
            for part in [name.split(".")[1]] if part.isdigit()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 0)
            n += 1
    return n


def claim(cmd: WarmCommand, env: dict[str, str], warm_dir: Path,
          job: Assignment) -> WarmProc | None:
    """Hand ``job`` to a ready standby matching ``cmd`` and ``env``; None when there is none
    (or every candidate fails): the caller starts the rank cold."""
    key = cmd.key(env)
    for marker in ready_standbys(warm_dir, key):
        claimed = marker.with_suffix(".claimed")
        try:
            os.rename(marker, claimed)
        except OSError:
            continue  # another adopter won it
        sock_path = marker.with_suffix(".sock")
        try:
            proc = WarmProc.adopt(sock_path, job)
        except (OSError, ProtocolError) as exc:
            log.info("standby %s unusable (%s): trying another", sock_path.name, exc)
            continue
        finally:
            with contextlib.suppress(OSError):
                claimed.unlink()
        return proc
    return None


class WarmProc:
    """A rank running in an adopted standby, with the part of :class:`subprocess.Popen`'s
    interface :class:`~trainguard.recover.local.LocalAttempt` uses.

    ``pid`` is the rank's own pid (its session and group id: ``killpg`` reaches it);
    ``returncode`` comes from the wait status the standby sends. Dropping the object closes the
    socket, and the standby then SIGKILLs the rank's group.
    """

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn = conn
        self.pid = pid
        self.returncode: int | None = None
        self._buf = b""

    @classmethod
    def adopt(cls, sock_path: Path, job: Assignment,
              timeout_s: float = PID_TIMEOUT_S) -> WarmProc:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(timeout_s)
            dir_fd = os.open(sock_path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                conn.connect(socket_path(dir_fd, sock_path.name))
            finally:
                os.close(dir_fd)
            conn.sendall(encode(job.to_json()))
            proc = cls(conn, 0)
            msg = proc._next(timeout_s)
            if msg is None:
                raise ProtocolError("the standby closed the socket before starting the rank")
            if msg["t"] != "pid":
                raise ProtocolError(f"the standby answered {msg}")
            proc.pid = parse_int(msg, "pid")
            os.set_inheritable(conn.fileno(), False)
            return proc
        except BaseException:
            conn.close()
            raise

    def _next(self, timeout_s: float | None) -> dict[str, object] | None:
        """The next message; None at end of file. ``timeout_s`` 0: only what is buffered."""
        while b"\n" not in self._buf:
            ready, _, _ = select.select([self._conn], [], [], timeout_s)
            if not ready:
                raise TimeoutError
            try:
                chunk = self._conn.recv(65536)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ProtocolError("message too long")
        line, self._buf = self._buf.split(b"\n", 1)
        return decode(line)

    def _settle(self, timeout_s: float | None) -> None:
        try:
            msg = self._next(timeout_s)
        except TimeoutError:
            return
        except (OSError, ProtocolError) as exc:
            msg = None
            log.warning("lost the standby of rank pid %d: %s", self.pid, exc)
        if msg is not None and msg.get("t") == "exit":
            self.returncode = os.waitstatus_to_exitcode(parse_int(msg, "status"))
        else:
            # The standby died without a status: the rank died with it (PR_SET_PDEATHSIG).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            self.returncode = -signal.SIGKILL
        self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._settle(left)
            if self.returncode is None and deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("warm rank", timeout or 0.0)
        return self.returncode

    def close(self) -> None:
        """Let go of the rank (the standby then kills its group if it still runs)."""
        self._conn.close()


def standby_env(base: dict[str, str], rank_env: dict[str, str]) -> dict[str, str]:
    """The environment a standby for a rank starts with: the backend's base environment with
    the rank's start-up variables (the rest is applied when the rank is assigned)."""
    return {**base, **startup_env(rank_env)}


__all__ = ["STANDBY_FILE", "WarmCommand", "WarmProc", "claim", "count_pending",
           "parse_command", "ready_standbys", "standby_env", "start_standby"]
