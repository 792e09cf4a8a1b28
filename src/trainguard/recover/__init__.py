"""Recovery: supervise a multi-node job, classify each failure, exclude the culprit, retry.

    >>> from pathlib import Path
    >>> from trainguard.recover import JobSpec, LocalBackend, Supervisor
    >>> spec = JobSpec(command=("python", "train.py"), nodes=("n1", "n2"), spares=("n3",),
    ...                nproc_per_node=2, run_dir=Path("run"))
    >>> sup = Supervisor(spec, LocalBackend())   # sup.run() -> RunResult
"""

from __future__ import annotations

from trainguard.recover.backend import (
    AttemptHandle,
    Backend,
    Capabilities,
    LaunchPlan,
    RankExit,
    RankLaunch,
)
from trainguard.recover.failure import (
    AttemptFacts,
    Failure,
    FailureKind,
    RankOutcome,
    Trigger,
    analyze,
)
from trainguard.recover.lifecycle import TRANSITIONS, Lifecycle, State
from trainguard.recover.local import LocalBackend
from trainguard.recover.policy import ChainState, Decision, Verdict, decide
from trainguard.recover.records import AttemptResult, Exclusion, RunResult
from trainguard.recover.registry import (
    BACKENDS,
    BackendEntry,
    BackendOptions,
    capabilities_of,
    create_backend,
)
from trainguard.recover.spec import JobSpec, RetryPolicy
from trainguard.recover.supervisor import Supervisor, run_job

__all__ = [
    "BACKENDS",
    "TRANSITIONS",
    "AttemptFacts",
    "AttemptHandle",
    "AttemptResult",
    "Backend",
    "BackendEntry",
    "BackendOptions",
    "Capabilities",
    "ChainState",
    "Decision",
    "Exclusion",
    "Failure",
    "FailureKind",
    "JobSpec",
    "LaunchPlan",
    "Lifecycle",
    "LocalBackend",
    "RankExit",
    "RankLaunch",
    "RankOutcome",
    "RetryPolicy",
    "RunResult",
    "State",
    "Supervisor",
    "Trigger",
    "Verdict",
    "analyze",
    "capabilities_of",
    "create_backend",
    "decide",
    "run_job",
]
