"""Starting one virtual host's PID 1 and the ``enter`` script that runs commands inside hosts.

A host is ``nsenter --net=<its netns> unshare --mount --uts --pid --fork --kill-child
--mount-proc``; the forked child (the host's PID 1) sets the hostname, bind-mounts the cluster
hosts file over /etc/hosts, mounts fresh tmpfs on /tmp and /var/log, and then becomes a tiny
Python reaper (orphans of the host are reparented to it).
"""

from __future__ import annotations

import selectors
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainguard.devcluster.common import DevClusterError, which

PRIVATE_DIRS = ("/tmp", "/var/log")  # fresh tmpfs in every host

# $1 name, $2 hosts file, $3 cluster root (kept visible even under /tmp), $4 python
_SETUP = r"""
set -e
printf '%s' "$1" > /proc/sys/kernel/hostname
mount --bind "$2" /etc/hosts
for dir in /tmp /var/log; do
  mode=0755; [ "$dir" = /tmp ] && mode=1777
  case "$3/" in
    "$dir"/*)  # the cluster root lives below: keep it visible through the new tmpfs
      cd "$3"; mount -t tmpfs -o "mode=$mode" tghost "$dir"
      mkdir -p "$3"; mount -c --bind . "$3"; cd / ;;
    *) mount -t tmpfs -o "mode=$mode" tghost "$dir" ;;
  esac
done
: > /var/log/kern.log
exec "$4" -c "$5"
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


def launch(
    name: str, netns: str, hosts_file: Path, root: Path, log: Path
) -> subprocess.Popen[bytes]:
    """Start host ``name``; the returned process is the outer ``unshare`` (root namespace)."""
    nsenter, unshare = which("nsenter"), which("unshare")
    if nsenter is None or unshare is None:
        raise DevClusterError("nsenter/unshare (util-linux) are not installed")
    argv = [nsenter, f"--net=/run/netns/{netns}", "--", unshare, "--mount", "--uts", "--pid",
            "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
            "/bin/sh", "-c", _SETUP, "tghost", name, str(hosts_file), str(root), sys.executable,
            _REAPER]
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
    """The text of ``enter NODE CMD [ARGS...]`` for live hosts ``(name, pid, pid-ns link)``."""
    nsenter = which("nsenter") or "nsenter"
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
        f'exec {shlex.quote(nsenter)} --target "$pid" --net --mount --uts --pid -- /bin/sh -c '
        f'{shlex.quote(inner)} enter "$PWD" "$node" "$@"',
        "",
    ])


__all__ = ["PRIVATE_DIRS", "enter_script", "launch", "wait_ready"]
