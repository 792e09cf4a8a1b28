"""Recovery: supervise a multi-node job, classify each failure, exclude the culprit, retry.

    >>> from pathlib import Path
    >>> from trainguard.recover import JobSpec, LocalBackend, Supervisor
    >>> spec = JobSpec(command=("python", "train.py"), nodes=("n1", "n2"), spares=("n3",),
    ...                nproc_per_node=2, run_dir=Path("run"))
    >>> sup = Supervisor(spec, LocalBackend())   # sup.run() -> RunResult
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use (PEP 562): ``trainguard agent`` loads trainguard.recover.local and
# friends on every host at every attempt, and must not pay for the store and the supervisor.
if TYPE_CHECKING:
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

_WHERE = {
    "AttemptFacts": "trainguard.recover.failure",
    "AttemptHandle": "trainguard.recover.backend",
    "AttemptResult": "trainguard.recover.records",
    "BACKENDS": "trainguard.recover.registry",
    "Backend": "trainguard.recover.backend",
    "BackendEntry": "trainguard.recover.registry",
    "BackendOptions": "trainguard.recover.registry",
    "Capabilities": "trainguard.recover.backend",
    "ChainState": "trainguard.recover.policy",
    "Decision": "trainguard.recover.policy",
    "Exclusion": "trainguard.recover.records",
    "Failure": "trainguard.recover.failure",
    "FailureKind": "trainguard.recover.failure",
    "JobSpec": "trainguard.recover.spec",
    "LaunchPlan": "trainguard.recover.backend",
    "Lifecycle": "trainguard.recover.lifecycle",
    "LocalBackend": "trainguard.recover.local",
    "RankExit": "trainguard.recover.backend",
    "RankLaunch": "trainguard.recover.backend",
    "RankOutcome": "trainguard.recover.failure",
    "RetryPolicy": "trainguard.recover.spec",
    "RunResult": "trainguard.recover.records",
    "State": "trainguard.recover.lifecycle",
    "Supervisor": "trainguard.recover.supervisor",
    "TRANSITIONS": "trainguard.recover.lifecycle",
    "Trigger": "trainguard.recover.failure",
    "Verdict": "trainguard.recover.policy",
    "analyze": "trainguard.recover.failure",
    "capabilities_of": "trainguard.recover.registry",
    "create_backend": "trainguard.recover.registry",
    "decide": "trainguard.recover.policy",
    "run_job": "trainguard.recover.supervisor",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return vars(importlib.import_module(module))[name]


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
