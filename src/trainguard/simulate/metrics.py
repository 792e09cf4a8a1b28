"""The simulated metric families (dcgm-exporter and node-exporter names) and the chunk format.

    >>> [m.name for m in GPU_METRICS][:2]
    ['DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_MEM_COPY_UTIL']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.telemetry.frame import (
    Entity,
    FloatArray,
    IntArray,
    MetricKind,
    MetricSeries,
    Telemetry,
)

__all__ = ["ALL_METRICS", "GPU_METRICS", "NODE_METRICS", "MetricBlock", "MetricDef", "SimChunk"]

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric family as it appears in the exposition."""

    name: str
    """Family name (`# TYPE` / `# HELP`)."""
    kind: MetricKind
    """GAUGE, COUNTER, or MONOTONIC (typed gauge, cumulative in fact)."""
    help: str
    decimals: int
    """Digits after the decimal point in the text output."""
    per_gpu: bool
    variants: tuple[Labels, ...] = ((),)
    """Extra label sets that split a node metric (mode, device); one row per node x variant."""
    suffix: str = ""
    """Appended to the family name on sample lines (node-exporter counters: `_total`)."""

    @property
    def sample_name(self) -> str:
        return self.name + self.suffix

    @property
    def type_word(self) -> str:
        return "counter" if self.kind is MetricKind.COUNTER else "gauge"


_G, _C, _M = MetricKind.GAUGE, MetricKind.COUNTER, MetricKind.MONOTONIC


def _gpu(name: str, kind: MetricKind, help_: str, decimals: int = 0) -> MetricDef:
    return MetricDef(f"DCGM_FI_{name}", kind, help_, decimals, True)


GPU_METRICS: tuple[MetricDef, ...] = (
    _gpu("DEV_GPU_UTIL", _G, "GPU utilization (in %)."),
    _gpu("DEV_MEM_COPY_UTIL", _G, "Memory utilization (in %)."),
    _gpu("DEV_SM_CLOCK", _G, "SM clock frequency (in MHz)."),
    _gpu("DEV_MEM_CLOCK", _G, "Memory clock frequency (in MHz)."),
    _gpu("DEV_GPU_TEMP", _G, "GPU temperature (in C)."),
    _gpu("DEV_MEMORY_TEMP", _G, "Memory temperature (in C)."),
    _gpu("DEV_POWER_USAGE", _G, "Power draw (in W).", 3),
    _gpu("DEV_TOTAL_ENERGY_CONSUMPTION", _C, "Total energy consumption since boot (in mJ)."),
    _gpu("DEV_FB_USED", _G, "Framebuffer memory used (in MiB)."),
    _gpu("DEV_FB_FREE", _G, "Framebuffer memory free (in MiB)."),
    _gpu("DEV_PCIE_REPLAY_COUNTER", _M, "Total number of PCIe retries."),
    _gpu("DEV_ECC_SBE_VOL_TOTAL", _M, "Total number of single-bit volatile ECC errors."),
    _gpu("DEV_ECC_DBE_VOL_TOTAL", _M, "Total number of double-bit volatile ECC errors."),
    _gpu("DEV_ECC_SBE_AGG_TOTAL", _M, "Total number of single-bit persistent ECC errors."),
    _gpu("DEV_ECC_DBE_AGG_TOTAL", _M, "Total number of double-bit persistent ECC errors."),
    _gpu("DEV_CORRECTABLE_REMAPPED_ROWS", _M, "Number of remapped rows for correctable errors."),
    _gpu("DEV_UNCORRECTABLE_REMAPPED_ROWS", _M,
         "Number of remapped rows for uncorrectable errors."),
    _gpu("DEV_ROW_REMAP_FAILURE", _G, "Whether remapping of rows has failed."),
    _gpu("DEV_XID_ERRORS", _G, "Value of the last XID error encountered."),
    _gpu("DEV_NVLINK_BANDWIDTH_TOTAL", _C,
         "Total number of NVLink bandwidth counters for all lanes (in KiB)."),
    _gpu("DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", _C,
         "Total number of NVLink flow-control CRC errors."),
    _gpu("PROF_GR_ENGINE_ACTIVE", _G, "Ratio of time the graphics engine is active.", 4),
    _gpu("PROF_PIPE_TENSOR_ACTIVE", _G, "Ratio of cycles the tensor (HMMA) pipe is active.", 4),
    _gpu("PROF_DRAM_ACTIVE", _G, "Ratio of cycles the device memory interface is active.", 4),
    _gpu("DEV_CLOCK_THROTTLE_REASONS", _G, "Current clock throttle reasons (bitmask)."),
    _gpu("PROF_PCIE_TX_BYTES", _G, "Rate of data transmitted over the PCIe bus (in B/s)."),
    _gpu("PROF_PCIE_RX_BYTES", _G, "Rate of data received over the PCIe bus (in B/s)."),
)


def _node(name: str, kind: MetricKind, help_: str, decimals: int = 0,
          variants: tuple[Labels, ...] = ((),)) -> MetricDef:
    suffix = "_total" if kind is MetricKind.COUNTER else ""
    return MetricDef(name, kind, help_, decimals, False, variants, suffix)


_NFS = (("export", "nfs01:/ckpt"), ("mountpoint", "/ckpt"), ("protocol", "tcp"))
NODE_METRICS: tuple[MetricDef, ...] = (
    _node("node_load1", _G, "1m load average.", 2),
    _node("node_cpu_seconds", _C, "Seconds the CPUs spent in each mode (summed over CPUs).", 2,
          tuple((("mode", m),) for m in ("user", "system", "iowait", "idle"))),
    _node("node_memory_MemAvailable_bytes", _G, "Memory information field MemAvailable_bytes."),
    _node("node_network_receive_bytes", _C, "Network device statistic receive_bytes.", 0,
          ((("device", "ib0"),), (("device", "eth0"),))),
    _node("node_network_transmit_bytes", _C, "Network device statistic transmit_bytes.", 0,
          ((("device", "ib0"),), (("device", "eth0"),))),
    _node("node_mountstats_nfs_total_read_bytes", _C,
          "Number of bytes read using the read() syscall.", 0, (_NFS,)),
    _node("node_mountstats_nfs_total_write_bytes", _C,
          "Number of bytes written using the write() syscall.", 0, (_NFS,)),
    _node("node_disk_read_bytes", _C, "The total number of bytes read successfully.", 0,
          ((("device", "nvme0n1"),),)),
    _node("node_disk_written_bytes", _C, "The total number of bytes written successfully.", 0,
          ((("device", "nvme0n1"),),)),
    _node("node_hwmon_temp_celsius", _G, "Hardware monitor for temperature (input).", 1,
          ((("chip", "platform_coretemp_0"), ("sensor", "temp1")),)),
    _node("node_boot_time_seconds", _G, "Node boot time, in unixtime."),
)

ALL_METRICS: tuple[MetricDef, ...] = GPU_METRICS + NODE_METRICS


@dataclass(frozen=True, eq=False)
class MetricBlock:
    """One metric family over one window: `values[row, t]`, NaN where no sample was scraped."""

    spec: MetricDef
    entities: tuple[Entity, ...]
    labels: tuple[Labels, ...]
    """Full label set of each row (entity labels and variant labels; no job label)."""
    values: FloatArray


@dataclass(frozen=True, eq=False)
class SimChunk:
    """Everything generated for one epoch-aligned 2-hour window.

    `node_job[node, t]` indexes `job_ids` (-1: idle); nodes are in `node_names` order.
    """

    start_s: int
    end_s: int
    times: IntArray
    step_s: int
    metrics: tuple[MetricBlock, ...]
    node_names: tuple[str, ...]
    node_job: IntArray
    job_ids: tuple[str, ...]

    def jobs(self) -> dict[str, tuple[str, ...]]:
        """Node -> per-time job id ("" when idle), as `Telemetry.jobs` expects."""
        ids = np.array([*self.job_ids, ""], dtype=object)
        return {n: tuple(ids[self.node_job[i]].tolist())
                for i, n in enumerate(self.node_names)}

    def to_telemetry(self, with_jobs: bool = False) -> Telemetry:
        """This window as the shared `Telemetry` frame (one series per metric key)."""
        series: list[MetricSeries] = []
        for block in self.metrics:
            spec = block.spec
            for v, extra in enumerate(spec.variants):
                rows = slice(v, None, len(spec.variants))
                key = spec.sample_name + ("{" + ",".join(f'{k}="{x}"' for k, x in extra) + "}"
                                          if extra else "")
                series.append(MetricSeries(key, spec.kind, block.entities[rows],
                                           block.values[rows]))
        return Telemetry(self.times, self.step_s, tuple(series),
                         self.jobs() if with_jobs else {})
