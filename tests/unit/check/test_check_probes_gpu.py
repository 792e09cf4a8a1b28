"""The gpu probe against fake NVML module objects (no GPU here), gpu_perf without CUDA."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

import trainguard.check.probes_gpu_perf as perf
from trainguard.check.judge import judge, summarize
from trainguard.check.model import Level, Status
from trainguard.check.probe_base import HARD_FAIL_FACT, ProbeParams
from trainguard.check.probes_gpu import gpu_health
from trainguard.check.probes_gpu_perf import gpu_perf, peak_bf16_tflops


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class NVMLErrorNotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(3)


@dataclass
class FakeGPU:
    name: Any = "NVIDIA H100 80GB HBM3"
    ecc: int | None = 1  # None: not supported
    retired_pending: int | None = None  # None: not supported (Ampere and later)
    remap: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    throttle: int = 0x1  # idle
    persistence: int = 1


@dataclass
class FakeNVML:
    """Stands in for the pynvml module: the attributes the probe uses."""

    gpus: list[FakeGPU]
    init_error: bool = False
    fail_name: bool = False
    calls: list[str] = field(default_factory=list)
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLErrorNotSupported

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error:
            raise NVMLError(9)  # driver not loaded

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGPU:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: FakeGPU) -> Any:
        if self.fail_name:
            raise NVMLError(999)
        return h.name

    def nvmlDeviceGetPersistenceMode(self, h: FakeGPU) -> int:
        return h.persistence

    def nvmlDeviceGetEccMode(self, h: FakeGPU) -> tuple[int, int]:
        if h.ecc is None:
            raise NVMLErrorNotSupported()
        return h.ecc, h.ecc

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGPU) -> int:
        if h.retired_pending is None:
            raise NVMLErrorNotSupported()
        return h.retired_pending

    def nvmlDeviceGetRemappedRows(self, h: FakeGPU) -> tuple[int, int, int, int]:
        if h.remap is None:
            raise NVMLErrorNotSupported()
        return h.remap

    def nvmlDeviceGetClockInfo(self, h: FakeGPU, kind: int) -> int:
        return 345 if kind == 1 else 2619

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGPU, kind: int) -> int:
        return 1980 if kind == 1 else 2619

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGPU) -> int:
        return h.throttle


def _run(nvml: FakeNVML, **kw: Any) -> Any:
    return gpu_health(ProbeParams("g1", **kw), nvml=nvml)


def _hard(result: Any) -> list[str]:
    return [v for k, v in result.facts if k == HARD_FAIL_FACT]


def test_healthy_gpus_pass() -> None:
    nvml = FakeNVML([FakeGPU() for _ in range(8)])
    r = _run(nvml, expected_gpus=8)
    assert r.status is Status.OK and _hard(r) == []
    assert r.figure("gpu_count") is not None and r.figure("gpu_count").value == 8  # type: ignore[union-attr]
    facts = dict(r.facts)
    assert facts["gpu7.name"] == "NVIDIA H100 80GB HBM3" and facts["gpu0.ecc"] == "on"
    assert facts["gpu0.sm_clock_mhz"] == "345/1980" and facts["gpu0.throttle"] == "none"
    assert "kernel log" in facts["xids"]
    assert nvml.calls == ["init", "shutdown"]
    assert summarize(judge([r])) == {"g1": Level.PASS}


@pytest.mark.parametrize(("gpu", "expected"), [
    (FakeGPU(remap=(0, 2, 1, 0)), "remapped rows pending"),
    (FakeGPU(remap=(0, 0, 0, 1)), "row remapping failure"),
    (FakeGPU(remap=None, retired_pending=1, name=b"Tesla V100-SXM2-32GB"), "retired pages"),
    (FakeGPU(ecc=0), "ECC is off"),
])
def test_a_hard_problem_on_one_gpu_is_a_fail(gpu: FakeGPU, expected: str) -> None:
    r = _run(FakeNVML([FakeGPU(), gpu]))
    assert r.status is Status.OK
    assert len(_hard(r)) == 1 and expected in _hard(r)[0] and "GPU 1" in _hard(r)[0]
    findings = judge([r])
    assert summarize(findings) == {"g1": Level.FAIL}
    assert any(expected in f.reason for f in findings if f.level is Level.FAIL)


def test_ecc_off_passes_when_not_required_and_unsupported_ecc_never_fails() -> None:
    assert _hard(_run(FakeNVML([FakeGPU(ecc=0)]), require_ecc=False)) == []
    r = _run(FakeNVML([FakeGPU(ecc=None)]))
    assert _hard(r) == [] and dict(r.facts)["gpu0.ecc"] == "not supported"


def test_a_missing_gpu_is_a_fail() -> None:
    r = _run(FakeNVML([FakeGPU() for _ in range(7)]), expected_gpus=8)
    assert _hard(r) == ["7 GPUs found, 8 expected"]
    assert summarize(judge([r])) == {"g1": Level.FAIL}


def test_throttle_reasons_are_named() -> None:
    r = _run(FakeNVML([FakeGPU(throttle=0x1 | 0x8 | 0x40)]))
    assert dict(r.facts)["gpu0.throttle"] == "hw_slowdown,hw_thermal"


def test_an_nvml_error_is_an_error_and_nvml_is_shut_down() -> None:
    nvml = FakeNVML([FakeGPU()], fail_name=True)
    r = _run(nvml)
    assert r.status is Status.ERROR and "999" in r.reason
    assert nvml.calls == ["init", "shutdown"]
    assert summarize(judge([r])) == {"g1": Level.FAIL}


def test_no_driver_or_no_nvml_module_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(FakeNVML([], init_error=True))
    assert r.status is Status.SKIPPED and r.reason.startswith("no NVML")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    r = gpu_health(ProbeParams("g1"))
    assert r.status is Status.SKIPPED and "no NVML" in r.reason
    assert summarize(judge([r])) == {"g1": Level.SKIPPED}


def test_gpu_perf_is_skipped_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    r = gpu_perf(ProbeParams("g1"))  # CPU-only torch here, or none
    assert r.status is Status.SKIPPED and r.reason.startswith("no CUDA")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert gpu_perf(ProbeParams("g1")).reason.startswith("no CUDA")


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H200", 989.0),
    ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA L40S", 362.05), ("NVIDIA B200", 2250.0),
    ("Tesla T4", None),
])
def test_peak_table(name: str, peak: float | None) -> None:
    assert peak_bf16_tflops(name) == peak


class _FakeCuda:
    @staticmethod
    def device_count() -> int:
        return 2

    @staticmethod
    def get_device_name(i: int) -> str:
        return "NVIDIA H100 80GB HBM3"


class _FakeTorch:
    cuda = _FakeCuda


def test_gpu_perf_reports_the_slowest_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    numbers = [{"gemm_tflops": 700.0, "hbm_gbps": 3000.0, "h2d_gbps": 50.0, "d2h_gbps": 40.0},
               {"gemm_tflops": 350.0, "hbm_gbps": 3100.0, "h2d_gbps": 55.0, "d2h_gbps": 45.0}]
    monkeypatch.setattr(perf, "measure_gpu", lambda torch, i, deadline: numbers[i])
    r = gpu_perf(ProbeParams("g1"), torch=_FakeTorch())
    assert r.status is Status.OK
    assert {f.name: f.value for f in r.figures} == {
        "gemm_tflops": 350.0, "hbm_gbps": 3000.0, "h2d_gbps": 50.0, "d2h_gbps": 40.0}
    facts = dict(r.facts)
    assert facts["slowest_gemm_gpu"] == "1"
    assert facts["gpu1.gemm_fraction_of_peak"].startswith("0.35 of 989")
