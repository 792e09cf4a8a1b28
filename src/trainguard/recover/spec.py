"""What to run and how hard to try: the job spec and the retry policy's knobs.

Both are validated when built, so a bad option is one clear :class:`ConfigError` before anything
is launched.

    >>> spec = JobSpec(command=("python", "train.py"), nodes=("n1", "n2"), nproc_per_node=2,
    ...                run_dir=Path("run"))
    >>> spec.world_size
    4
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Literal

from trainguard.errors import ConfigError
from trainguard.faultspec import FaultKind, FaultSpec
from trainguard.recover.nodename import validate_node_name
from trainguard.snapshot.layout import DEFAULT_ROOT

SnapshotEvery = int | Literal["auto", "off"]
"""``auto`` (adaptive K), a fixed K >= 1 (steps between snapshots), or ``off``."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the supervisor reacts to failures (see :func:`trainguard.recover.policy.decide`)."""

    max_retries: int = 5
    """Relaunches per chain after the first launch; the chain stops when they are spent."""
    backoff_s: float = 1.0
    """Wait before the second relaunch of a run of failures (the first relaunch is immediate,
    as torchrun's); doubles after each further one."""
    backoff_max_s: float = 60.0
    """Cap on the wait between relaunches."""
    confirm_retries: int = 1
    """Relaunches that may confirm a user-code or configuration error before the chain stops."""
    max_rollbacks: int = 2
    """Times the chain may step back to an earlier checkpoint (NaN loss, corrupt checkpoint)."""
    implicated_limit: int = 2
    """A node named as the culprit this many times in one chain is excluded."""
    crash_loop_restarts: int = 3
    """The chain stops when this many restarts in a row made no progress (0: never); see
    :mod:`trainguard.recover.crashloop`."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError("max_retries must be >= 0")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ConfigError("backoff_s and backoff_max_s must be >= 0")
        if self.confirm_retries < 0:
            raise ConfigError("confirm_retries must be >= 0")
        if self.max_rollbacks < 0:
            raise ConfigError("max_rollbacks must be >= 0")
        if self.implicated_limit < 1:
            raise ConfigError("implicated_limit must be >= 1")
        if isinstance(self.crash_loop_restarts, bool) or not isinstance(
                self.crash_loop_restarts, int) or self.crash_loop_restarts < 0:
            raise ConfigError("crash_loop_restarts (--crash-loop-restarts) must be an "
                              "integer >= 0 (0: off), not "
                              f"{self.crash_loop_restarts!r}")

    def backoff_for(self, consecutive_failures: int) -> float:
        """Seconds to wait before relaunching after ``consecutive_failures`` (>= 1) failures:
        0, then ``backoff_s``, doubling, capped at ``backoff_max_s``."""
        if consecutive_failures <= 1:
            return 0.0
        return float(min(self.backoff_max_s,
                         self.backoff_s * 2.0 ** (consecutive_failures - 2)))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One supervised training job."""

    command: tuple[str, ...]
    """The program and its arguments, run once per rank."""
    nodes: tuple[str, ...]
    """Nodes of the first launch, in rank order (node i holds ranks i*P .. i*P+P-1)."""
    nproc_per_node: int
    """Processes (ranks) per node."""
    run_dir: Path
    """Where rank output, SDK events, node directories and ``summary.json`` go."""
    spares: tuple[str, ...] = ()
    """Nodes that replace excluded ones, in order."""
    min_nodes: int | None = None
    """Smallest node count the job may shrink to when spares run out; None: never shrink."""
    name: str = "job"
    """Session name in the store."""
    hang_timeout_s: float = 300.0
    """A rank without progress (SDK heartbeat, else output) for this long means a hang."""
    startup_timeout_s: float = 900.0
    """Allowance before a rank's first progress (imports, rendezvous, checkpoint load)."""
    term_timeout_s: float = 10.0
    """Between SIGTERM and SIGKILL when stopping ranks."""
    exit_grace_s: float = 30.0
    """A rank that told the SDK it finished but has not exited after this long (a hang in
    the framework's teardown) is stopped, and counts as having succeeded."""
    peer_exit_grace_s: float = 5.0
    """After a rank's exit that may be a crash in teardown (an abort, a fault, any exit after
    ``finish()``), how long the other ranks may take to exit on their own before they are
    stopped: their exits tell a crash in teardown (they finish, exit 0) from one mid-training."""
    poll_interval_s: float = 0.05
    """How often the supervisor looks at processes, heartbeats and watched logs."""
    kernel_log: str = "{run_dir}/nodes/{node}/kern.log"
    """Watched kernel log per node; ``{node}`` and ``{run_dir}`` are substituted."""
    alerts_file: Path | None = None
    """JSON lines of detector alerts (``trainguard detect --alerts-out``) to watch."""
    alerts_replay: Path | None = None
    """Where ``--inject alert:node=X`` takes the alert it replays (a detector's alerts file)."""
    stop_on_predictive: bool = False
    """Stop an attempt on a predictive detector alert too (hard alerts always stop it)."""
    master_port: int | None = None
    """Rendezvous port; None picks a free one per launch."""
    faults: tuple[FaultSpec, ...] = ()
    """Faults to inject (tests, demos): ``trainguard run --inject``."""
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    snapshot_root: Path = DEFAULT_ROOT
    """Where each host keeps the run's in-memory snapshots (a tmpfs; ``--snapshot-root``)."""
    snapshot_every: SnapshotEvery = "auto"
    """Steps between memory snapshots of scripts that call ``Checkpoints.snapshot``."""
    failure_domains: Mapping[str, str] | None = None
    """Node -> failure domain; a node's buddy (which holds its replicas) is in another one."""
    warm: bool = False
    """Keep warm standby interpreters for the next attempt (``--warm``; off by default: each
    standby holds torch and the script's imports in memory and uses CPU while it imports)."""

    def __post_init__(self) -> None:
        if not self.command or not self.command[0].strip():
            raise ConfigError("no command given: trainguard run [OPTIONS] -- COMMAND ARGS...")
        if not self.nodes:
            raise ConfigError("--nodes is empty: name at least one node")
        for node in self.nodes:
            validate_node_name(node, "--nodes")
        for node in self.spares:
            validate_node_name(node, "--spares")
        everyone = (*self.nodes, *self.spares)
        dupes = sorted({n for n in everyone if everyone.count(n) > 1})
        if dupes:
            raise ConfigError(f"node(s) listed twice in --nodes/--spares: {', '.join(dupes)}")
        if self.nproc_per_node < 1:
            raise ConfigError("--nproc-per-node must be >= 1")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= len(self.nodes):
            raise ConfigError(f"--min-nodes must be between 1 and the {len(self.nodes)} node(s) "
                              "of --nodes")
        for key, value in (("hang_timeout_s", self.hang_timeout_s),
                           ("startup_timeout_s", self.startup_timeout_s),
                           ("poll_interval_s", self.poll_interval_s)):
            if not value > 0:
                raise ConfigError(f"{key} must be > 0")
        if self.term_timeout_s < 0 or self.exit_grace_s < 0:
            raise ConfigError("term_timeout_s and exit_grace_s must be >= 0")
        if not self.peer_exit_grace_s >= 0:
            raise ConfigError("--peer-exit-grace must be >= 0")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise ConfigError("--master-port must be between 1 and 65535")
        for fault in self.faults:
            if fault.kind is FaultKind.ALERT and self.alerts_file is None:
                raise ConfigError(f"fault {fault} needs --alerts FILE (the feed it writes to)")
            if fault.node is not None and fault.node not in everyone:
                raise ConfigError(f"fault {fault} names node {fault.node!r}, which is not in "
                                  "--nodes or --spares")
        self._check_snapshots(everyone)

    def _check_snapshots(self, everyone: tuple[str, ...]) -> None:
        every = self.snapshot_every
        if isinstance(every, bool) or not (every in ("auto", "off") or (
                isinstance(every, int) and every >= 1)):
            raise ConfigError(f"--snapshot-every must be auto, off or an integer >= 1, "
                              f"not {every!r}")
        if not self.snapshot_root.is_absolute():
            raise ConfigError(f"--snapshot-root must be an absolute path: {self.snapshot_root}")
        for node, domain in (self.failure_domains or {}).items():
            if node not in everyone:
                raise ConfigError(f"--failure-domains names node {node!r}, which is not in "
                                  "--nodes or --spares")
            if not domain.strip():
                raise ConfigError(f"--failure-domains gives node {node!r} an empty domain")

    @property
    def snapshots(self) -> bool:
        """The memory snapshot tier is on (scripts that call ``Checkpoints.snapshot``)."""
        return self.snapshot_every != "off"

    @property
    def world_size(self) -> int:
        return len(self.nodes) * self.nproc_per_node

    def kernel_log_path(self, node: str) -> Path:
        return Path(self.kernel_log.replace("{run_dir}", str(self.run_dir))
                    .replace("{node}", node))


def parse_snapshot_every(text: str) -> SnapshotEvery:
    """``--snapshot-every``: ``auto``, ``off`` or a positive integer; :class:`ConfigError`
    otherwise."""
    value = text.strip().lower()
    if value in ("auto", "off"):
        return "auto" if value == "auto" else "off"
    try:
        steps = int(value)
    except ValueError:
        steps = 0
    if steps < 1:
        raise ConfigError(f"--snapshot-every must be auto, off or an integer >= 1, not {text!r}")
    return steps


def parse_failure_domains(value: str) -> dict[str, str]:
    """``--failure-domains``: a file (JSON object, or lines ``node=domain`` / ``node domain``,
    ``#`` comments) or an inline list ``node1=rackA,node2=rackB``. :class:`ConfigError` (one
    line) on a file that cannot be read or a malformed entry."""
    path = Path(value)
    if "=" in value and not path.exists():
        text, where = value.replace(",", "\n"), "--failure-domains"
    else:
        try:
            text, where = path.read_text(), str(path)
        except OSError as exc:
            raise ConfigError(f"--failure-domains: cannot read {value}: "
                              f"{exc.strerror or exc}") from exc
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{where}: not valid JSON: {exc}") from exc
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise ConfigError(f"{where}: expected a JSON object of node -> domain name")
        return {str(k): v for k, v in doc.items()}
    domains: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in (line.split("=", 1) if "=" in line else line.split(None, 1))]
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"{where}: entry {number} is not node=domain: {raw.strip()!r}")
        if parts[0] in domains:
            raise ConfigError(f"{where}: node {parts[0]!r} is given twice")
        domains[parts[0]] = parts[1]
    if not domains:
        raise ConfigError(f"{where}: no node=domain entry")
    return domains


_SCRIPT_SUFFIXES = (".py", ".sh", ".bash")
_RUNNERS = re.compile(r"^(?:python[0-9.]*|pypy[0-9.]*|env|torchrun|uv|uvx|poetry|pipenv|conda|"
                      r"run|exec|bash|sh|nice|ionice|numactl|taskset|time|stdbuf)$")


def job_name(command: Sequence[str]) -> str:
    """A run's default name from its command: the script's stem (``train_gpt`` for ``python
    examples/train_gpt.py --loss-log loss.txt``), the module of ``python -m pkg.mod`` (``mod``),
    else the program's name; ``job`` for an empty command."""
    args = list(command)
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1].rsplit(".", 1)[-1] or "job"
        if arg.startswith("-m") and len(arg) > 2 and i > 0:
            return arg[2:].rsplit(".", 1)[-1]
        if not arg.startswith("-") and "=" not in arg and arg.endswith(_SCRIPT_SUFFIXES):
            return PurePath(arg).stem or "job"
    for arg in args:
        if arg.startswith("-") or ("=" in arg and not arg.startswith("/")):
            continue  # options, environment assignments (env A=1 ...)
        name = PurePath(arg).name
        if not _RUNNERS.match(name):
            return name
    return PurePath(args[0]).name if args else "job"


__all__ = ["JobSpec", "RetryPolicy", "SnapshotEvery", "job_name", "parse_failure_domains",
           "parse_snapshot_every"]
