"""The failure taxonomy: categories, recommended actions and severities used everywhere.

Categories say *what broke*; actions say *what an operator (or the supervisor) should do next*.
Both are plain string enums so they serialize to JSON and SQL as their value.

Most categories name what a log line says (the classifier's signatures). Two are the
supervisor's own diagnoses, never a log line's (:data:`SUPERVISOR_CATEGORIES`):
``collective_hang``, a job that stopped making progress while its ranks wait in (or never reach)
a collective, whatever the backend (the backend, ``nccl``, ``gloo`` or ``unknown``, is a detail
of the failure; ``nccl_timeout_hang`` stays what an NCCL watchdog's timeout line says); and
``injected_fault``, a kill or a stop that trainguard itself delivered (``run --inject``,
``trainguard inject``).
"""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    """What kind of failure a piece of evidence points to."""

    GPU_HARDWARE = "gpu_hardware"
    GPU_MEMORY_ECC = "gpu_memory_ecc"
    NVLINK_INTERCONNECT = "nvlink_interconnect"
    NETWORK_IB = "network_ib"
    NCCL_TIMEOUT_HANG = "nccl_timeout_hang"
    CUDA_SOFTWARE_BUG = "cuda_software_bug"
    OOM_GPU = "oom_gpu"
    OOM_HOST = "oom_host"
    NUMERICAL_NAN = "numerical_nan"
    STORAGE_IO = "storage_io"
    CHECKPOINT = "checkpoint"
    SCHEDULER_NODE_FAILURE = "scheduler_node_failure"
    USER_CODE_ERROR = "user_code_error"
    COLLECTIVE_HANG = "collective_hang"
    """The supervisor's diagnosis: no progress, the ranks wait in (or never reach) a collective;
    any backend."""
    INJECTED_FAULT = "injected_fault"
    """The supervisor's diagnosis: a kill or stop trainguard delivered (a drill)."""
    UNKNOWN = "unknown"


SUPERVISOR_CATEGORIES = frozenset({Category.COLLECTIVE_HANG, Category.INJECTED_FAULT})
"""Categories only the supervisor's diagnosis gives (from exits, heartbeats, collective state
and the faults it delivered), never a log line: the log corpora need not cover them."""


class Action(StrEnum):
    """The recommended next step."""

    RESTART_JOB = "restart_job"
    EXCLUDE_NODE = "exclude_node"
    REBOOT_NODE = "reboot_node"
    RESET_GPU = "reset_gpu"
    FIX_CODE = "fix_code"
    FIX_CONFIG = "fix_config"
    CHECK_NETWORK = "check_network"
    CHECK_STORAGE = "check_storage"
    NONE = "none"


class Severity(StrEnum):
    """How bad one event is on its own."""

    FATAL = "fatal"
    NON_FATAL = "non-fatal"
    INFO = "info"


SEVERITY_RANK: dict[Severity, int] = {Severity.FATAL: 2, Severity.NON_FATAL: 1, Severity.INFO: 0}

# Which categories are a *root cause* rather than a consequence when several appear in one
# incident. Hardware first: one dead GPU makes every other rank report NCCL/network errors.
CATEGORY_PRIORITY: dict[Category, int] = {
    Category.GPU_HARDWARE: 100,
    Category.GPU_MEMORY_ECC: 98,
    Category.NVLINK_INTERCONNECT: 95,
    Category.SCHEDULER_NODE_FAILURE: 90,
    Category.OOM_HOST: 85,
    Category.OOM_GPU: 84,
    Category.STORAGE_IO: 80,
    Category.CHECKPOINT: 78,
    Category.NUMERICAL_NAN: 75,
    Category.CUDA_SOFTWARE_BUG: 70,
    Category.USER_CODE_ERROR: 65,
    Category.NETWORK_IB: 60,
    Category.NCCL_TIMEOUT_HANG: 40,
    Category.COLLECTIVE_HANG: 40,
    Category.INJECTED_FAULT: 30,
    Category.UNKNOWN: 0,
}

# The default action for a category when a rule does not name one.
DEFAULT_ACTION: dict[Category, Action] = {
    Category.GPU_HARDWARE: Action.REBOOT_NODE,
    Category.GPU_MEMORY_ECC: Action.RESET_GPU,
    Category.NVLINK_INTERCONNECT: Action.REBOOT_NODE,
    Category.NETWORK_IB: Action.CHECK_NETWORK,
    Category.NCCL_TIMEOUT_HANG: Action.RESTART_JOB,
    Category.CUDA_SOFTWARE_BUG: Action.FIX_CODE,
    Category.OOM_GPU: Action.FIX_CONFIG,
    Category.OOM_HOST: Action.FIX_CONFIG,
    Category.NUMERICAL_NAN: Action.FIX_CONFIG,
    Category.STORAGE_IO: Action.CHECK_STORAGE,
    Category.CHECKPOINT: Action.CHECK_STORAGE,
    Category.SCHEDULER_NODE_FAILURE: Action.EXCLUDE_NODE,
    Category.USER_CODE_ERROR: Action.FIX_CODE,
    Category.COLLECTIVE_HANG: Action.RESTART_JOB,
    Category.INJECTED_FAULT: Action.RESTART_JOB,
    Category.UNKNOWN: Action.NONE,
}

__all__ = ["CATEGORY_PRIORITY", "DEFAULT_ACTION", "SEVERITY_RANK", "SUPERVISOR_CATEGORIES",
           "Action", "Category", "Severity"]
