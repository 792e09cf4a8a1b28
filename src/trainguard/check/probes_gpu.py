"""The gpu probe: GPU health through NVML (no load is put on the GPUs).

NVML comes from ``nvidia-ml-py`` (module ``pynvml``), imported when the probe runs; tests pass
a fake module object instead (:func:`gpu_health`'s ``nvml``). Per GPU it reads the name,
persistence mode, current ECC mode, retired pages pending (pre-Ampere), remapped rows pending
and remapping failure (Ampere and later), SM and memory clocks against their maximum, and the
clock throttle reasons. XIDs are not available from NVML as a history: the kernel log is their
source (trainguard's evidence readers), which the ``xids`` fact says.

Hard problems are FAIL-marked facts (:data:`~trainguard.check.probe_base.HARD_FAIL_FACT`): a
remapping failure, retired pages or remapped rows pending (the GPU needs a reset), ECC off on
a GPU that supports it (unless ``require_ecc`` is False), fewer GPUs than ``expected_gpus``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from trainguard.check.model import ProbeResult, Status
from trainguard.check.probe_base import (
    HARD_FAIL_FACT,
    ProbeParams,
    describe,
    errored,
    figure,
    skipped,
)

# nvmlClocksThrottleReason* bits (nvml.h); idle and application-clock settings are normal.
THROTTLE_BITS = {
    0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
    0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock",
}
_FEATURE_ENABLED = 1
_CLOCK_SM, _CLOCK_MEM = 1, 2
Facts = list[tuple[str, str]]


def import_nvml() -> Any | None:
    """The ``pynvml`` module, or None when it is not installed."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return pynvml


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _not_supported(nvml: Any, exc: BaseException) -> bool:
    cls = getattr(nvml, "NVMLError_NotSupported", None)
    if isinstance(cls, type) and isinstance(exc, cls):
        return True
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)


def _optional(nvml: Any, call: Any, *args: Any) -> Any | None:
    """``call(*args)``, or None when the GPU does not support it (other errors propagate)."""
    try:
        return call(*args)
    except nvml.NVMLError as exc:
        if _not_supported(nvml, exc):
            return None
        raise


def _memory_checks(nvml: Any, i: int, handle: Any, require_ecc: bool,
                   facts: Facts) -> None:
    ecc = _optional(nvml, nvml.nvmlDeviceGetEccMode, handle)
    if ecc is None:
        facts.append((f"gpu{i}.ecc", "not supported"))
    else:
        on = ecc[0] == _FEATURE_ENABLED
        facts.append((f"gpu{i}.ecc", "on" if on else "off"))
        if not on and require_ecc:
            facts.append((HARD_FAIL_FACT, f"GPU {i}: ECC is off (supported)"))
    retired = _optional(nvml, nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    if retired is not None:
        facts.append((f"gpu{i}.retired_pages_pending", str(retired == _FEATURE_ENABLED)))
        if retired == _FEATURE_ENABLED:
            facts.append((HARD_FAIL_FACT, f"GPU {i}: retired pages pending (needs a reset)"))
    remap = _optional(nvml, nvml.nvmlDeviceGetRemappedRows, handle)
    if remap is not None:
        corr, unc, pending, failed = (int(x) for x in remap)
        facts.append((f"gpu{i}.remapped_rows", f"correctable={corr} uncorrectable={unc} "
                      f"pending={bool(pending)} failure={bool(failed)}"))
        if failed:
            facts.append((HARD_FAIL_FACT, f"GPU {i}: row remapping failure"))
        elif pending:
            facts.append((HARD_FAIL_FACT, f"GPU {i}: remapped rows pending (needs a reset)"))


def _clock_facts(nvml: Any, i: int, handle: Any, facts: Facts) -> None:
    for label, kind in (("sm", _CLOCK_SM), ("mem", _CLOCK_MEM)):
        now = _optional(nvml, nvml.nvmlDeviceGetClockInfo, handle, kind)
        top = _optional(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, kind)
        if now is not None and top is not None:
            facts.append((f"gpu{i}.{label}_clock_mhz", f"{now}/{top}"))
    get_reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    bits = _optional(nvml, get_reasons, handle) if get_reasons is not None else None
    if bits is not None:
        names = [name for bit, name in THROTTLE_BITS.items() if int(bits) & bit]
        facts.append((f"gpu{i}.throttle", ",".join(names) or "none"))


def _device_facts(nvml: Any, i: int, require_ecc: bool) -> Facts:
    handle = nvml.nvmlDeviceGetHandleByIndex(i)
    facts: Facts = [(f"gpu{i}.name", _text(nvml.nvmlDeviceGetName(handle)))]
    persist = _optional(nvml, nvml.nvmlDeviceGetPersistenceMode, handle)
    facts.append((f"gpu{i}.persistence",
                  "unknown" if persist is None else
                  "on" if persist == _FEATURE_ENABLED else "off"))
    _memory_checks(nvml, i, handle, require_ecc, facts)
    _clock_facts(nvml, i, handle, facts)
    return facts


def gpu_health(params: ProbeParams, nvml: Any | None = None) -> ProbeResult:
    """GPU health through NVML; ``nvml`` is the module to use (default: ``pynvml``)."""
    started = time.monotonic()
    nvml = nvml if nvml is not None else import_nvml()
    if nvml is None:
        return skipped("gpu", params, "no NVML (nvidia-ml-py not installed)")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:  # no driver, library not found, insufficient permissions
        return skipped("gpu", params, f"no NVML ({describe(exc)})")
    try:
        count = int(nvml.nvmlDeviceGetCount())
        facts: Facts = [("driver", _text(nvml.nvmlSystemGetDriverVersion())),
                        ("xids", "not available from NVML; read from the kernel log")]
        for i in range(count):
            facts.extend(_device_facts(nvml, i, params.require_ecc))
    except nvml.NVMLError as exc:
        return errored("gpu", params, f"NVML: {describe(exc)}", time.monotonic() - started)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
    if params.expected_gpus is not None and count < params.expected_gpus:
        facts.append((HARD_FAIL_FACT, f"{count} GPUs found, {params.expected_gpus} expected"))
    return ProbeResult("gpu", params.host, Status.OK, figures=(figure("gpu_count", count),),
                       duration_s=time.monotonic() - started, facts=tuple(facts))


__all__ = ["THROTTLE_BITS", "gpu_health", "import_nvml"]
