"""The table of `trainguard`'s commands: names, where each lives, and the line `--help` lists.

`trainguard --help` is printed from this table alone, and running a command imports only the
module that defines it (:mod:`trainguard.cli.lazygroup`): importing every command module up
front took longer than the work of a small command (issue #28). ``summary`` is the first
paragraph of the command's help; ``tests/unit/cli/test_command_table.py`` checks it, and the
names, against the commands themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMANDS", "Entry"]


@dataclass(frozen=True)
class Entry:
    """One top-level command or command group."""

    name: str
    target: str
    """``module:attribute``: a ``typer.Typer`` (a group) or a command function."""
    summary: str
    """What `trainguard --help` lists for it: the first paragraph of its help, reflowed."""
    help_attr: str | None = None
    """The command's help is this attribute of its module (default: the docstring)."""
    no_args_is_help: bool = False
    interspersed: bool = True
    """False: options after the first argument belong to it (`run ... -- python x.py -v`)."""


COMMANDS: tuple[Entry, ...] = (
    Entry("agent", "trainguard.agent.cli:agent",
          "Run this host's part of one attempt for a trainguard controller."),
    Entry("simulate", "trainguard.cli.simulate:simulate",
          "Simulate a GPU training cluster: OpenMetrics per 2-hour window, kernel logs, labels."),
    Entry("detect", "trainguard.cli.detect:detect",
          "Find failing nodes and GPUs in telemetry: predictive and hard alert episodes."),
    Entry("backtest", "trainguard.cli.detect:backtest",
          "Score trainguard and the baselines against known failures (the report's "
          "Analysis 1)."),
    Entry("tune", "trainguard.cli.tune:tune_command",
          "Choose the detector's thresholds and persistence from the cluster's own history and "
          "known failures: the most failures alerted at least a minute early, within a "
          "false-alarm budget. Tunes on the earlier part of the history and reports the "
          "figures of the later part it never saw."),
    Entry("run", "trainguard.cli.run:run",
          "Supervise a multi-node training job: every rank gets the torch.distributed "
          "environment; failures are classified, culprit nodes excluded, and the job "
          "relaunched from its last checkpoint. Put the command after `--`:",
          help_attr="run_help", no_args_is_help=True, interspersed=False),
    Entry("report", "trainguard.cli.report:report",
          "ETTR/goodput and its badput breakdown, failures, MTTR, retry chains, exclusion "
          "concentration, detection lead times, checkpoint bandwidth, and the checkpoint "
          "interval the ETTR model recommends. Terminal summary; --html for the plots, --json "
          "for scripts."),
    Entry("check", "trainguard.cli.check:check",
          "Validate hosts before (or after) they cost a job: compute, memory, storage, GPUs "
          "(NVML, GEMM, HBM and copy bandwidth, DCGM where installed), clock offset, and the "
          "links between hosts, each host compared with the others and with your floors."),
    Entry("watch", "trainguard.cli.watch:watch",
          "Run the detector live against Prometheus: warm up from history, score each new "
          "interval, raise alerts (store, Alertmanager, /metrics), optionally act on them."),
    Entry("logs", "trainguard.cli.logs:app", "Classify failure evidence in logs."),
    Entry("xid", "trainguard.cli.xid:app", "NVIDIA XID catalog."),
    Entry("inject", "trainguard.cli.inject:inject_app",
          "Inject faults into a running `trainguard run` (tests, demos, fire drills); each "
          "step is said on stderr."),
    Entry("nodes", "trainguard.cli.nodes:app",
          "Node-health memory: exclusions, XIDs, alerts, jobs taken down (hardware evidence), "
          "suspicions (a failure's evidence pointed at the node), lemon scores. Without a "
          "sub-command: list the nodes."),
    Entry("slurm", "trainguard.cli.slurm:app", "Slurm: import job history."),
    Entry("history", "trainguard.cli.history:app",
          "Fault histories: import a cluster's fault record (node fault events from tickets, "
          "repair logs or public traces) or its Slurm job history; list what was imported."),
    Entry("fleet", "trainguard.cli.fleet:fleet",
          "Fleet figures from an imported fault history: faults per node-day by type (with "
          "confidence intervals), MTBF per node and per job size, repair times and their tail, "
          "nodes down over time, lemon nodes (tested against the fleet's rate), and the "
          "planning answers: spares, checkpoint interval and expected ETTR, model vs a replay "
          "of the real faults."),
    Entry("advise", "trainguard.cli.advise:app", "Advice from the store's history."),
    Entry("ckpt", "trainguard.cli.ckpt:app",
          "Checkpoint path: profile the writer, find saves in telemetry."),
    Entry("nfs", "trainguard.cli.nfs:app", "Diagnose the NFS client path (mountstats)."),
    Entry("trace", "trainguard.cli.trace:app", "Per-rank tracing of a supervised run."),
    Entry("diagnose", "trainguard.cli.trace:diagnose_app",
          "Localize a hang or find stragglers in a run."),
)
