"""Where an agent reads its host's kernel log: the ``--kernel-log`` value, expanded for the node.

- a file (``/var/log/kern.log``): followed from its end, plus the recent history (lines of the
  last 10 minutes before the run started count, as on a single host);
- a directory (every regular file in it, new ones included) or a ``journalctl -o export`` file
  (``journal:PATH``, or a name ending in ``.export``): followed from the end;
- ``journalctl``: the live journal's kernel messages (``journalctl -k -o export -f``, from 10
  minutes before the run started);
- ``/dev/kmsg``: the kernel's ring buffer, where this user may read it.

The live sources are copied by a helper (a ``journalctl`` process, a reader thread) into a file
in the agent's work directory, which is then followed like any other: one tailing code path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trainguard.agent.workdir import create_private
from trainguard.errors import ConfigError
from trainguard.evidence.events import FailureEvent
from trainguard.evidence.rules import RuleSet
from trainguard.recover.watch import HISTORY_S, NodeWatch

if TYPE_CHECKING:  # the watch service's readers load only for the sources that need them
    from trainguard.watch.kernlog import LogSource

log = logging.getLogger(__name__)

JOURNALCTL = "journalctl"
KMSG = "/dev/kmsg"


class KernelLog(Protocol):
    def poll(self, now: float) -> list[FailureEvent]: ...

    def close(self) -> None: ...


def kmsg_line(record: bytes) -> str:
    """One ``/dev/kmsg`` record as a kernel-log text line (pure).

    >>> kmsg_line(b"3,1234,8123456789,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1\\n")
    '[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1'
    """
    head, _, message = record.partition(b";")
    fields = head.split(b",")
    usec = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
    text = message.split(b"\n", 1)[0].decode("utf-8", "replace")
    return f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {text}"


class _Tailed:
    """A :class:`KernelLogTailer` over parsed sources, from their end."""

    def __init__(self, sources: list[LogSource], rules: RuleSet,
                 stop: Callable[[], None] | None = None, *, from_end: bool = True) -> None:
        from trainguard.watch.kernlog import KernelLogTailer

        self._tailer = KernelLogTailer(sources, rules, from_end=from_end)
        self._stop = stop

    def poll(self, now: float) -> list[FailureEvent]:
        return self._tailer.poll()

    def close(self) -> None:
        if self._stop is not None:
            self._stop()


class _FileWithHistory:
    def __init__(self, node: str, path: Path, rules: RuleSet, since: float) -> None:
        try:  # as a single-host run does: the watched file exists from the start
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the watched kernel log {path}: "
                              f"{exc.strerror or exc}") from exc
        self._watch = NodeWatch({node: path}, rules, since=since)

    def poll(self, now: float) -> list[FailureEvent]:
        return self._watch.poll(now)

    def close(self) -> None:
        pass


def _journalctl(node: str, rules: RuleSet, since: float, work_dir: Path) -> KernelLog:
    from trainguard.watch.kernlog import LogSource

    copy = work_dir / "journal-kernel.export"
    start = datetime.fromtimestamp(max(0.0, since - HISTORY_S), UTC)
    argv = [JOURNALCTL, "-k", "-o", "export", "-f", "--no-pager",
            "--since", start.strftime("%Y-%m-%d %H:%M:%S UTC")]
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with os.fdopen(create_private(copy), "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL,
                                    stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ConfigError(f"cannot run {JOURNALCTL}: {exc.strerror or exc}") from exc

    def stop() -> None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)

    # From the start of the copy: journalctl itself starts at the history window.
    return _Tailed([LogSource(copy, node, "journal-export")], rules, stop, from_end=False)


def _kmsg(node: str, rules: RuleSet, since: float, work_dir: Path) -> KernelLog:
    from trainguard.watch.kernlog import LogSource

    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"cannot read {KMSG}: {exc.strerror or exc}") from exc
    os.lseek(fd, 0, os.SEEK_END)  # new records only: kmsg has no wall-clock times to filter by
    copy = work_dir / "kmsg.log"
    try:
        work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        copy_fd = create_private(copy)
    except OSError as exc:
        os.close(fd)
        raise ConfigError(f"cannot create {copy}: {exc.strerror or exc}") from exc
    done = threading.Event()

    def pump() -> None:
        with os.fdopen(copy_fd, "a", encoding="utf-8") as out:
            while not done.is_set():
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:
                    time.sleep(0.2)
                    continue
                except OSError:  # EPIPE: records were overwritten before we read them
                    continue
                if record:
                    out.write(kmsg_line(record) + "\n")
                    out.flush()

    threading.Thread(target=pump, name="kmsg", daemon=True).start()

    def stop() -> None:
        done.set()
        os.close(fd)

    return _Tailed([LogSource(copy, node)], rules, stop)


def open_kernel_log(spec: str, node: str, rules: RuleSet, since: float,
                    work_dir: Path) -> KernelLog:
    """The reader for ``spec`` on this host; :class:`ConfigError` when it cannot be read."""
    text = spec.strip()
    if text == JOURNALCTL:
        return _journalctl(node, rules, since, work_dir)
    if text == KMSG:
        return _kmsg(node, rules, since, work_dir)
    path = Path(text)
    plain = not text.startswith("journal:") and not path.is_dir() \
        and not path.name.endswith(".export")
    if plain:
        return _FileWithHistory(node, path, rules, since)
    from trainguard.watch.kernlog import parse_sources

    return _Tailed(parse_sources([f"{node}={text}"]), rules)


__all__ = ["JOURNALCTL", "KMSG", "KernelLog", "kmsg_line", "open_kernel_log"]
