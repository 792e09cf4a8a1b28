"""A small knowledge base of metric names: a bonus, never a dependency.

The detector works on whatever metrics exist. Knowing a few dcgm-exporter fields lets it pick a
good activity signal for peer grouping, treat XID and uncorrectable-error fields as hard evidence,
and weight known precursors (PCIe replays, correctable ECC / remapped rows, NVLink CRC) a little
more. Unknown names get the generic treatment.
"""

from __future__ import annotations

import re

from trainguard.evidence.xid import xid_info
from trainguard.taxonomy import Category, Severity

__all__ = [
    "ACTIVITY_FIELDS",
    "ACTIVITY_METRICS",
    "error_family",
    "is_cooling_control",
    "is_fatal_hardware_xid",
    "is_hard_counter",
    "is_hardware_xid",
    "is_known_precursor",
    "is_load",
    "is_power",
    "is_repair_counter",
    "is_supporting_only",
    "is_temperature",
    "is_volume_counter",
    "is_wear_counter",
    "is_workload_following",
    "is_workload_shaped",
    "is_xid_metric",
]

# Preferred activity signals, best first (utilisation moves with the job; power follows it).
ACTIVITY_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_DEV_POWER_USAGE",
)

ACTIVITY_FIELDS = frozenset(ACTIVITY_METRICS[:3])
"""GPU activity fields: a GPU whose activity departs from its siblings' in a synchronous job
is stalling (power is not one: it also follows temperature and clocks)."""

_XID = re.compile(r"XID", re.IGNORECASE)
# Fields whose increase means an uncorrectable error already happened.
_HARD = re.compile(
    r"ECC_DBE|DBE_VOL|DBE_AGG|UNCORRECTABLE_REMAPPED_ROWS|ROW_REMAP_FAILURE|RETIRED_DBE",
    re.IGNORECASE)
_PRECURSOR = re.compile(
    r"PCIE_REPLAY|ECC_SBE|SBE_VOL|SBE_AGG|CORRECTABLE_REMAPPED_ROWS|RETIRED_SBE|NVLINK_CRC|"
    r"NVLINK_.*ERROR|REPLAY_ERROR|RECOVERY_ERROR|THROTTLE|MEMORY_TEMP|GPU_TEMP",
    re.IGNORECASE)
# Correctable memory errors and the rows remapped for them: HBM wear, which grows slowly over
# hours to days before an uncorrectable error (the trend test watches these).
_CORRECTABLE_ECC = r"ECC_SBE|SBE_VOL|SBE_AGG|ECC_CORR|HBM_ECC_CORRECTED"
_WEAR = re.compile(_CORRECTABLE_ECC + r"|CORRECTABLE_REMAPPED_ROWS|RETIRED_SBE", re.IGNORECASE)
# Repairs the GPU made for good: rows remapped to spares, pages retired. A healthy GPU spends
# a spare now and then in its life, never hour after hour, so their recurrence is never chance.
_REPAIR = re.compile(r"REMAPPED_ROWS|RETIRED_SBE|RETIRED_PAGES|RETIRED_COUNT", re.IGNORECASE)
# Fields the job sets, not the hardware: memory allocated, bytes moved. A deviation there is
# mostly a different workload on that GPU, so they count half.
_WORKLOAD = re.compile(r"FB_USED|FB_FREE|FB_RESERVED|_BYTES|BANDWIDTH", re.IGNORECASE)
# Cooling controls: the fan follows the temperature, and a fan that wears out is a chassis or
# cooling repair, not a GPU about to fail.
_COOLING = re.compile(r"FAN", re.IGNORECASE)
_TEMPERATURE = re.compile(r"TEMP", re.IGNORECASE)
# Fields the job drives on every GPU it runs on: activity, occupancy, power draw, plus the
# workload-shaped ones. All of a node's GPUs moving together there is the node's job.
_WORKLOAD_FOLLOWING = re.compile(
    r"UTIL|_ACTIVE|OCCUPANCY|POWER_USAGE|POWER_DRAW|ENERGY|FB_USED|FB_FREE|FB_RESERVED|_BYTES|"
    r"BANDWIDTH", re.IGNORECASE)
# Power drawn: the gauge, and the energy counter (scored by its rate, which is the power).
_POWER = re.compile(r"POWER_USAGE|POWER_DRAW|ENERGY", re.IGNORECASE)
_FREE_MEMORY = re.compile(r"FB_FREE", re.IGNORECASE)
_WORK_CLOCK = re.compile(r"SM_CLOCK|MEM_CLOCK", re.IGNORECASE)
# Counters that accumulate whenever the device works (energy drawn, bytes moved, time spent):
# quiet on an idle node, moving on every busy one. Their increments are never error events, however
# long the cluster sat idle before a job started.
_VOLUME = re.compile(r"ENERGY|_BYTES|BYTES_TOTAL|_SECONDS_TOTAL|_PACKETS|THROUGHPUT|BANDWIDTH",
                     re.IGNORECASE)
# Counters and gauges that report one physical event more than once: a link's CRC errors and
# the replays they cause, a volatile and an aggregate copy of the same ECC count, a gauge and its
# renamed successor. As evidence each family counts once (`error_family`).
_FAMILIES = (
    ("nvlink_errors", re.compile(r"NVLINK.*(ERROR|CRC|REPLAY|RECOVERY)", re.IGNORECASE)),
    ("pcie_errors", re.compile(r"PCIE.*(REPLAY|ERROR|ROLLOVER|NAK)", re.IGNORECASE)),
    ("correctable_ecc", re.compile(_CORRECTABLE_ECC, re.IGNORECASE)),
    ("clock_reasons", re.compile(r"THROTTLE_REASONS|CLOCKS?_EVENT_REASONS", re.IGNORECASE)),
)
_HW_CATEGORIES = frozenset({Category.GPU_HARDWARE, Category.GPU_MEMORY_ECC,
                            Category.NVLINK_INTERCONNECT})


def _base(name: str) -> str:
    return name.split("{", 1)[0]


def is_xid_metric(name: str) -> bool:
    """dcgm-exporter's XID gauge (value = the last XID seen on that GPU)."""
    return bool(_XID.search(_base(name)))


def is_hard_counter(name: str) -> bool:
    return bool(_HARD.search(_base(name)))


def is_known_precursor(name: str) -> bool:
    return bool(_PRECURSOR.search(_base(name))) and not is_hard_counter(name)


def is_supporting_only(name: str) -> bool:
    """Evidence beside another signal, never alone: a cooling control (fan speed), or a field
    the job sets (memory allocated, bytes moved): a different workload on one GPU moves them
    as much as a failing GPU does."""
    return is_cooling_control(name) or is_workload_shaped(name)


def is_cooling_control(name: str) -> bool:
    return bool(_COOLING.search(_base(name)))


def is_temperature(name: str) -> bool:
    return bool(_TEMPERATURE.search(_base(name)))


def is_workload_following(name: str) -> bool:
    """A GPU field the job drives (activity, occupancy, power draw and energy, memory, bytes
    moved)."""
    return bool(_WORKLOAD_FOLLOWING.search(_base(name)))


def is_load(name: str) -> bool:
    """A GPU field that rises when the GPU is given more work: a field the job drives
    (`is_workload_following`) other than power (it also rises alone on a failing GPU) and free
    memory (it falls), or a clock an idle GPU lowers. A GPU more loaded than its siblings or its
    own normal runs a job they do not; it is not failing by it.

        >>> is_load("DCGM_FI_DEV_GPU_UTIL"), is_load("DCGM_FI_DEV_FB_FREE")
        (True, False)
        >>> is_load("DCGM_FI_DEV_POWER_USAGE"), is_load("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
        (False, False)
    """
    base = _base(name)
    return bool(_WORK_CLOCK.search(base)) or (
        bool(_WORKLOAD_FOLLOWING.search(base)) and not _POWER.search(base)
        and not _FREE_MEMORY.search(base))


def is_power(name: str) -> bool:
    """A GPU power-draw gauge, or its energy counter (scored by its rate: the power drawn).

        >>> is_power("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), is_power("DCGM_FI_DEV_GPU_UTIL")
        (True, False)
    """
    return bool(_POWER.search(_base(name)))


def is_wear_counter(name: str) -> bool:
    """A correctable memory-error or row-remap counter (not an uncorrectable one)."""
    return bool(_WEAR.search(_base(name))) and not is_hard_counter(name)


def is_repair_counter(name: str) -> bool:
    """A counter of repairs made for good after correctable errors (rows remapped to spares,
    pages retired), not an uncorrectable one.

        >>> is_repair_counter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")
        True
        >>> is_repair_counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
        False
    """
    return bool(_REPAIR.search(_base(name))) and not is_hard_counter(name)


def is_workload_shaped(name: str) -> bool:
    return bool(_WORKLOAD.search(_base(name)))


def is_volume_counter(name: str) -> bool:
    """A counter of work done (energy, bytes, packets, seconds), not of errors.

        >>> is_volume_counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total")
        True
        >>> is_volume_counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
        False
    """
    return bool(_VOLUME.search(_base(name)))


def error_family(name: str) -> str | None:
    """The family of fields that report the same physical events as `name` (None: its own).

        >>> error_family("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")
        'nvlink_errors'
        >>> error_family("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL")
        'nvlink_errors'
        >>> error_family("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") is None
        True
    """
    if is_hard_counter(name) or is_volume_counter(name):
        return None
    base = _base(name)
    return next((family for family, pattern in _FAMILIES if pattern.search(base)), None)


def is_hardware_xid(xid: int) -> bool:
    """True for XIDs that point at the GPU, its memory or NVLink (not at the application)."""
    return xid > 0 and xid_info(xid).category in _HW_CATEGORIES


REPAIR_XIDS = frozenset({63})
"""XIDs that record a repair the GPU made for good: 63, a row marked for remapping to a spare
(on GPUs before Ampere, a page retired). NVIDIA's catalog asks no action for them."""


def is_repair_xid(xid: int) -> bool:
    """A hardware XID that records a repair (`REPAIR_XIDS`): one spare spent, which a healthy
    GPU does now and then in its life. On its own it is a watch, not a warning (`confirm.py`).

    >>> is_repair_xid(63), is_repair_xid(64), is_repair_xid(92)
    (True, False, False)
    """
    return xid in REPAIR_XIDS


def is_fatal_hardware_xid(xid: int) -> bool:
    """A hardware XID that NVIDIA's catalog calls fatal: hard evidence. The others (a row
    remapping recorded, XID 63; excessive single-bit interrupts, 92; an error contained to one
    application, 94; an XID the catalog does not list) ask no action of the node now; they are
    early warnings (63 once its GPU confirms it, `is_repair_xid`), as the same XID in a kernel
    log stops no job.

    >>> is_fatal_hardware_xid(79), is_fatal_hardware_xid(63), is_fatal_hardware_xid(13)
    (True, False, False)
    """
    return is_hardware_xid(xid) and xid_info(xid).severity is Severity.FATAL
