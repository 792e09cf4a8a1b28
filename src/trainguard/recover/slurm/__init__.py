"""Slurm: hostlists, safe client-tool calls, and job history into the store.

    >>> from trainguard.recover.slurm import compress_hostlist, expand_hostlist
    >>> expand_hostlist("node[1-3,7]")
    ('node1', 'node2', 'node3', 'node7')
    >>> compress_hostlist(["gpu001", "gpu002", "gpu003"])
    'gpu[001-003]'
"""

from __future__ import annotations

from trainguard.recover.slurm.commands import (
    NodeInfo,
    Runner,
    SlurmCommands,
    parse_key_values,
    subprocess_runner,
)
from trainguard.recover.slurm.history import (
    History,
    ImportResult,
    SlurmJob,
    import_history,
    load_history,
    parse_jobcomp,
    parse_sacct,
    parse_squeue_json,
    plan_sessions,
)
from trainguard.recover.slurm.hostlist import compress_hostlist, expand_hostlist
from trainguard.recover.slurm.safety import job_name, sanitize_reason, validate_node_name

__all__ = [
    "History",
    "ImportResult",
    "NodeInfo",
    "Runner",
    "SlurmCommands",
    "SlurmJob",
    "compress_hostlist",
    "expand_hostlist",
    "import_history",
    "job_name",
    "load_history",
    "parse_jobcomp",
    "parse_key_values",
    "parse_sacct",
    "parse_squeue_json",
    "plan_sessions",
    "sanitize_reason",
    "subprocess_runner",
    "validate_node_name",
]
