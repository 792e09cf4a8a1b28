"""Starting one virtual host's PID 1 and the ``enter`` script that runs commands inside hosts.

A host is ``nsenter --net=<its netns> unshare --mount --uts --pid --fork --kill-child
--mount-proc``; the forked child (the host's PID 1) sets the hostname, bind-mounts the cluster
hosts file over /etc/hosts, mounts fresh tmpfs on /tmp, /var/log and /dev/shm (with the
cluster root, the checkout and its venv bind-mounted back where they lie below them), and then
becomes a tiny Python reaper (orphans of the host are reparented to it).
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from trainguard.devcluster.common import DevClusterError, which

PRIVATE_DIRS = ("/tmp", "/var/log", "/dev/shm")  # fresh tmpfs in every host (/dev/shm: its
# own host memory, freed when the host's PID namespace is killed)
# Hosts have no route off this machine: their resolver asks their own loopback, so a name that
# is not in /etc/hosts fails at once instead of after a DNS timeout (glibc also asks for an IPv6
# address of names that /etc/hosts maps to IPv4 only, e.g. ``getent hosts host1``).
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"

# $1 name, $2 hosts file, $3 resolv.conf, $4 python, $5 the reaper's code, then the paths to
# keep visible through the private tmpfs mounts (the cluster root, the checkout, the venv): each
# is bind-mounted back at its own path from the directory the tmpfs hides (the shell's working
# directory, reached as ".").
_SETUP = r"""
set -e
printf '%s' "$1" > /proc/sys/kernel/hostname
mount --bind "$2" /etc/hosts
mount --bind "$3" /etc/resolv.conf
py=$4; code=$5; shift 5
for dir in /tmp /var/log /dev/shm; do
  mode=0755; [ "$dir" != /var/log ] && mode=1777
  cd "$dir"
  mount -t tmpfs -o "mode=$mode" tghost "$dir"
  for keep in "$@"; do
    case "$keep/" in
      "$dir"/*) mkdir -p "$keep"; mount -c --bind ".${keep#"$dir"}" "$keep" ;;
    esac
  done
  cd /
done
: > /var/log/kern.log
exec "$py" -c "$code"
"""

_REAPER = """
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
os.write(1, b"ready\\n")
os.close(1)
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    signal.sigtimedwait({signal.SIGCHLD}, 60)
"""


def keep_visible(paths: Iterable[Path], private: Sequence[str] = PRIVATE_DIRS
                 ) -> tuple[Path, ...]:
    """Of ``paths``, those a host's private mounts would hide (strictly below one of
    ``private``), without any that lies inside another: what :func:`launch` mounts back.

    >>> keep_visible([Path("/tmp/a/b"), Path("/tmp/a"), Path("/usr"), Path("/tmp"),
    ...               Path("/dev/shm/x")])
    (PosixPath('/dev/shm/x'), PosixPath('/tmp/a'))
    """
    below = {Path(os.path.normpath(p)) for p in paths
             if any(Path(p).is_absolute() and Path(p).is_relative_to(d) and Path(p) != Path(d)
                    for d in private)}
    return tuple(sorted(p for p in below
                        if not any(q != p and p.is_relative_to(q) for q in below)))


def process_paths() -> list[Path]:
    """Directories this process's commands need inside the hosts: its interpreter and
    environment, the trainguard package's source, its import path, its working directory
    (a checkout or venv under /tmp would otherwise be hidden by the host's private /tmp)."""
    import trainguard

    found = [Path(sys.prefix), Path(sys.executable).parent,
             Path(trainguard.__file__).resolve().parent.parent, Path.cwd()]
    found += [Path(p) for p in sys.path if p]
    found += [p.resolve() for p in found]
    return [p for p in found if p.is_absolute() and p.is_dir()]


def launch(name: str, netns: str, etc: Path, keep: Sequence[Path], log: Path
           ) -> subprocess.Popen[bytes]:
    """Start host ``name`` with ``etc/hosts`` and ``etc/resolv.conf``, ``keep``
    (:func:`keep_visible`) still visible through its private mounts; the returned process is
    the outer ``unshare`` (root namespace)."""
    nsenter, unshare = which("nsenter"), which("unshare")
    if nsenter is None or unshare is None:
        raise DevClusterError("nsenter/unshare (util-linux) are not installed")
    argv = [nsenter, f"--net=/run/netns/{netns}", "--", unshare, "--mount", "--uts", "--pid",
            "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
            "/bin/sh", "-c", _SETUP, "tghost", name, str(etc / "hosts"),
            str(etc / "resolv.conf"), sys.executable, _REAPER, *map(str, keep)]
    with log.open("ab") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)


def wait_ready(procs: Mapping[str, subprocess.Popen[bytes]], logs: Mapping[str, Path],
               timeout_s: float) -> None:
    """Wait until every host's PID 1 has printed ``ready`` (its mounts are in place)."""
    sel = selectors.DefaultSelector()
    for name, proc in procs.items():
        assert proc.stdout is not None  # stdout=PIPE in launch()
        sel.register(proc.stdout, selectors.EVENT_READ, name)
    pending = set(procs)
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DevClusterError(f"hosts not ready after {timeout_s:g} s: "
                                      f"{', '.join(sorted(pending))}")
            for key, _ in sel.select(left):
                name = key.data
                stream = procs[name].stdout
                line = stream.readline() if stream is not None else b""
                sel.unregister(key.fileobj)
                if line.strip() != b"ready":
                    tail = logs[name].read_text(errors="replace")[-400:].strip()
                    raise DevClusterError(f"host {name} failed to start: {tail or 'no output'}")
                pending.discard(name)
    finally:
        sel.close()


def enter_script(hosts: Sequence[tuple[str, int, str]], dead: Sequence[str]) -> str:
    """The text of ``enter NODE CMD [ARGS...]`` for live hosts ``(name, pid, pid-ns link)``.

    nsenter must fork to enter a PID namespace and forwards no signal to its child, so:
    1. nsenter and the command run with ``setpriv --pdeathsig KILL``: if this script dies
       (e.g. Popen.kill()), nsenter and then the command die too instead of living on;
    2. this script relays TERM, INT and HUP to the command (nsenter's child), so
       Popen.terminate() still lets it shut down gracefully;
    3. a command killed by a signal makes this script die by the same signal (as nsenter does).
    """
    nsenter = which("nsenter") or "nsenter"
    setpriv = which("setpriv") or "setpriv"
    names = " ".join(h[0] for h in hosts)
    cases = [f"  {name}) pid={pid}; ns={shlex.quote(link)} ;;" for name, pid, link in hosts]
    cases += [f"  {name}) echo \"enter: host '{name}' was killed\" >&2; exit 2 ;;"
              for name in dead]
    inner = ('cd "$1" 2>/dev/null || { echo "enter: working directory $1 does not exist in '
             'host $2" >&2; exit 2; }; shift 2; exec "$@"')
    return "\n".join([
        "#!/bin/sh",
        "# Written by trainguard.devcluster: run CMD inside virtual host NODE's network, mount,",
        "# UTS and PID namespaces, with the caller's environment and working directory.",
        'if [ $# -lt 2 ]; then echo "usage: $0 NODE CMD [ARGS...]" >&2; exit 2; fi',
        'node=$1; shift',
        'case $node in',
        *cases,
        f"  *) printf \"enter: unknown host '%s' (hosts: {names})\\n\" \"$node\" >&2; exit 2 ;;",
        "esac",
        'if [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" != "$ns" ]; then',
        '  echo "enter: host \'$node\' is not running" >&2; exit 2',
        "fi",
        "exec 3<&0  # an asynchronous command's stdin would be /dev/null: keep the caller's",
        f'{shlex.quote(setpriv)} --pdeathsig KILL -- '
        f'{shlex.quote(nsenter)} --target "$pid" --net --mount --uts --pid -- '
        f'{shlex.quote(setpriv)} --pdeathsig KILL -- /bin/sh -c {shlex.quote(inner)} enter '
        '"$PWD" "$node" "$@" <&3 3<&- &',
        "child=$!",
        "exec 3<&-",
        'relay() { for k in $(cat /proc/$child/task/*/children 2>/dev/null); do '
        'kill -s "$1" "$k" 2>/dev/null; done; }',
        "trap 'relay TERM' TERM; trap 'relay INT' INT; trap 'relay HUP' HUP",
        'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done',
        'if [ "$rc" -gt 128 ]; then trap - TERM INT HUP; kill -"$((rc - 128))" $$; fi',
        'exit "$rc"',
        "",
    ])


__all__ = ["PRIVATE_DIRS", "RESOLV_CONF", "enter_script", "keep_visible", "launch",
           "process_paths", "wait_ready"]
