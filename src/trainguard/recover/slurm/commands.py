"""Thin wrappers around the Slurm client tools (sinfo, scontrol, scancel, squeue, sacct).

Commands are argv lists, never shell strings; node names are validated and reasons sanitized
(:mod:`.safety`) before they reach argv. The process runner is injectable, so tests record argv
instead of running Slurm.

    >>> slurm = SlurmCommands(env={"SLURM_CONF": "/etc/slurm/slurm.conf"})
    >>> slurm.drain("node2", "xid 79 on GPU 3")      # doctest: +SKIP
    >>> slurm.sinfo_nodes()["node2"].drained          # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.slurm.hostlist import expand_hostlist
from trainguard.recover.slurm.safety import sanitize_reason, validate_node_name

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
"""Runs one argv list and returns its completed process (text mode, output captured)."""

# `scontrol show ... -o` and the jobcomp file print `Key=value Key=value ...` where a few values
# (Reason, Command, WorkDir, JobName) may hold spaces. A new pair starts at whitespace followed by
# a key and "=". Slurm's keys start with a capital letter (`JobId`, `AllocNode:Sid`, `CPUs/Task`);
# requiring that keeps `python train.py lr=3` inside a Command value.
_KEY_BOUNDARY = re.compile(r"(?:^|\s+)([A-Z][A-Za-z:/_]*)=")
_JOB_ID = re.compile(r"\d+(?:[_+]\d+)?", re.ASCII)
_STEP_ID = re.compile(r"\d+(?:[_+]\d+)?(?:\.\d+)?", re.ASCII)
_SINFO_FORMAT = "%N|%T|%E"  # `|` cannot occur in a node name; the reason is last (may hold `|`)
_INVALID_HOSTLIST = "Invalid hostlist"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node as ``sinfo`` reports it."""

    name: str
    state: str
    """sinfo's long state, lower case: ``idle``, ``allocated``, ``drained``, ``draining``,
    ``down*`` (a trailing ``*``: the node does not respond)."""
    reason: str | None
    """Why the node is drained or down; None when Slurm has no reason (``none``)."""

    @property
    def responding(self) -> bool:
        return not self.state.endswith("*")

    @property
    def drained(self) -> bool:
        """Drained or draining: the scheduler starts no new job on it."""
        return self.state.rstrip("*~#!%$@^-").startswith("drain")


def parse_key_values(line: str) -> dict[str, str]:
    """``"JobId=5 JobName=rq job Reason=None"`` -> ``{"JobId": "5", "JobName": "rq job", ...}``.

    Values end where the next `` Key=`` starts (keys: a capital letter, then letters, ``:``,
    ``/``, ``_``), so values with spaces survive; a value that itself holds `` Word=`` with a
    capitalised word is cut there (the text formats are ambiguous; nothing better exists).
    Text before the first key is ignored; a repeated key keeps its first value.
    """
    matches = list(_KEY_BOUNDARY.finditer(line))
    pairs: dict[str, str] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        pairs.setdefault(match.group(1), line[match.end() : end].strip())
    return pairs


def subprocess_runner(
    env: Mapping[str, str] | None = None, timeout_s: float = 60.0
) -> Runner:
    """The default runner: ``subprocess.run`` with ``os.environ`` updated by ``env``."""
    full_env = {**os.environ, **(env or {})}

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=full_env, timeout=timeout_s,
            check=False,
        )

    return run


class SlurmCommands:
    """The Slurm client tools as typed calls.

    ``runner`` runs one argv list (default: :func:`subprocess_runner` with ``env`` on top of the
    current environment, e.g. ``{"SLURM_CONF": ...}``). A missing tool, a timeout or a non-zero
    exit raises :class:`LaunchError` naming the command and the first line of its stderr.
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        runner: Runner | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.env: dict[str, str] = dict(env or {})
        self._runner = runner if runner is not None else subprocess_runner(self.env, timeout_s)

    # -- nodes --------------------------------------------------------------------------------

    def sinfo_nodes(self) -> dict[str, NodeInfo]:
        """Every node by name (a node in several partitions appears once)."""
        proc = self.run(["sinfo", "-h", "-N", "-o", _SINFO_FORMAT])
        nodes: dict[str, NodeInfo] = {}
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            fields = line.split("|", 2)
            if len(fields) != 3:
                raise LaunchError(f"sinfo: unexpected line {line!r}")
            name, state, reason = (f.strip() for f in fields)
            nodes.setdefault(name, NodeInfo(
                name=name, state=state.lower(),
                reason=None if reason.lower() in ("", "none", "(null)") else reason))
        return nodes

    def drain(self, node: str, reason: str) -> None:
        """``scontrol update nodename=NODE state=drain reason=...`` (reason sanitized)."""
        self._update_node(node, "drain", reason)

    def resume(self, node: str) -> None:
        """``scontrol update nodename=NODE state=resume``: back to service."""
        self._update_node(node, "resume", None)

    def _update_node(self, node: str, state: str, reason: str | None) -> None:
        argv = ["scontrol", "update", f"nodename={validate_node_name(node)}", f"state={state}"]
        if reason is not None:
            argv.append(f"reason={sanitize_reason(reason)}")
        self.run(argv)

    def hostnames(self, expr: str) -> tuple[str, ...]:
        """``scontrol show hostnames EXPR``; :func:`expand_hostlist` if scontrol is missing."""
        argv = ["scontrol", "show", "hostnames", expr]
        try:
            proc = self._spawn(argv)
        except FileNotFoundError:
            log.debug("scontrol not found; expanding %r in Python", expr)
            return expand_hostlist(expr)
        # scontrol 22.05 exits 0 on a bad expression and says so on stdout or stderr
        if _INVALID_HOSTLIST in proc.stdout or _INVALID_HOSTLIST in proc.stderr:
            raise ConfigError(f"invalid hostlist {expr!r}: {_first_line(proc.stderr)}")
        _check(argv, proc)
        return tuple(proc.stdout.split())

    # -- jobs ---------------------------------------------------------------------------------

    def show_job(self, job_id: int | str) -> dict[str, str]:
        """``scontrol show job -o JOBID`` as ``{"JobState": "FAILED", "ExitCode": "3:0", ...}``.

        For an array or heterogeneous job (several lines) the first line is returned.
        """
        proc = self.run(["scontrol", "show", "job", "-o", _job_id(job_id)])
        for line in proc.stdout.splitlines():
            if line.strip():
                return parse_key_values(line)
        raise LaunchError(f"scontrol show job {job_id}: no output")

    def cancel(self, job_id: int | str) -> None:
        self.run(["scancel", _job_id(job_id)])

    def kill(self, job_or_step: str) -> None:
        """``scancel --signal=KILL --full ID``: SIGKILL every process of a job (its batch
        shell too) or of a step (``JOB.STEP``) now, stopped ones included, without
        ``KillWait``'s grace; then ``scancel ID`` so Slurm ends it."""
        target = _step_id(job_or_step)
        full = [] if "." in target else ["--full"]
        self.run(["scancel", "--signal=KILL", *full, target])
        self.run(["scancel", target])

    def steps_named(self, job_id: int | str, name: str) -> list[str]:
        """``JOB.STEP`` ids of ``job_id``'s running steps called ``name`` (``srun
        --job-name``), from ``squeue --steps``."""
        proc = self.run(["squeue", "-h", "--steps", "-j", _job_id(job_id), "-o", "%i|%j"])
        found = []
        for line in proc.stdout.splitlines():
            step, _, step_name = line.strip().partition("|")
            if step_name == name and _STEP_ID.fullmatch(step):
                found.append(step)
        return found

    def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as ``{"JobCompType": "jobcomp/filetxt", ...}``."""
        proc = self.run(["scontrol", "show", "config"])
        config: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and " " not in key.strip():
                config.setdefault(key.strip(), value.strip())
        return config

    def squeue_json(self) -> str:
        """``squeue -t all --json``: jobs the controller still remembers (MinJobAge)."""
        return self.run(["squeue", "-t", "all", "--json"]).stdout

    def sacct(self, fields: Sequence[str], *, since: str = "now-7days") -> str:
        """``sacct -P -n -X -D -S SINCE --format=...``: one line per job record, requeues
        included (``-D``), no steps (``-X``). Needs accounting (slurmdbd)."""
        argv = ["sacct", "-P", "-n", "-X", "-D", "-S", since, f"--format={','.join(fields)}"]
        return self.run(argv).stdout

    # -- plumbing -----------------------------------------------------------------------------

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv``; :class:`LaunchError` unless it exits 0."""
        argv = list(argv)
        try:
            proc = self._spawn(argv)
        except FileNotFoundError as exc:
            raise LaunchError(
                f"{argv[0]} not found: install the Slurm client tools (slurm-client)"
            ) from exc
        _check(argv, proc)
        return proc

    def _spawn(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """The runner's result; a missing program stays ``FileNotFoundError``."""
        try:
            return self._runner(argv)
        except subprocess.TimeoutExpired as exc:
            raise LaunchError(f"{shlex.join(argv)} timed out after {exc.timeout:g} s") from exc
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise LaunchError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc


def _check(argv: Sequence[str], proc: subprocess.CompletedProcess[str]) -> None:
    if proc.returncode != 0:
        detail = _first_line(proc.stderr) or _first_line(proc.stdout) or "no output"
        raise LaunchError(f"{shlex.join(argv)} failed (exit {proc.returncode}): {detail}")


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _step_id(text: str) -> str:
    """A job id or a ``JOB.STEP`` id; `ConfigError` otherwise."""
    text = str(text).strip()
    if _STEP_ID.fullmatch(text) is None:
        raise ConfigError(f"invalid Slurm job or step id {text!r}")
    return text


def _job_id(job_id: int | str) -> str:
    text = str(job_id).strip()
    if _JOB_ID.fullmatch(text) is None:
        raise ConfigError(f"invalid Slurm job id {job_id!r}")
    return text


__all__ = ["NodeInfo", "Runner", "SlurmCommands", "parse_key_values", "subprocess_runner"]
