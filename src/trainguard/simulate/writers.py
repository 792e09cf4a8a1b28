"""Files on disk: OpenMetrics windows, per-node kernel logs, ground-truth labels, manifest.

The OpenMetrics text is built per family with one `str.join` per series: the label prefix is the
separator, so each sample costs one value-to-string conversion and one concatenation.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from trainguard.simulate.faults import APP_XIDS, Failure
from trainguard.simulate.metrics import MetricBlock, SimChunk
from trainguard.simulate.scenario import Scenario, rng_for

__all__ = ["OpenMetricsWriter", "kernel_logs", "label_records", "window_file_name"]

_GZIP_LEVEL = 1


def window_file_name(start_s: int, compress: bool) -> str:
    return f"metrics-{start_s}.om" + (".gz" if compress else "")


class OpenMetricsWriter:
    """Writes each `SimChunk` as one OpenMetrics 1.0 file (seconds timestamps, final # EOF)."""

    def __init__(self, out_dir: Path, compress: bool = False, job_label: bool = False) -> None:
        self.out_dir = out_dir
        self.compress = compress
        self.job_label = job_label
        self._prefixes: dict[str, list[str]] = {}

    def write(self, chunk: SimChunk) -> tuple[Path, int, int]:
        """Returns (path, bytes written, samples written)."""
        path = self.out_dir / window_file_name(chunk.start_s, self.compress)
        with open(path, "wb") as raw:
            if self.compress:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                   compresslevel=_GZIP_LEVEL, mtime=0) as gz:
                    samples = self._write_all(chunk, gz.write)
            else:
                samples = self._write_all(chunk, raw.write)
            size = raw.tell()
        return path, size, samples

    def _write_all(self, chunk: SimChunk, write: Callable[[bytes], object]) -> int:
        samples = 0
        ts = [f" {t}\n" for t in chunk.times.tolist()]
        # zlib and file writes release the GIL: compress/write one family on a helper thread
        # while the next is formatted (about 1.5x faster where a second core is free).
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending: Future[object] | None = None
            for block in chunk.metrics:
                text, n = self._family(block, chunk, ts)
                data = text.encode()
                if pending is not None:
                    pending.result()
                pending = pool.submit(write, data)
                samples += n
            if pending is not None:
                pending.result()
        write(b"# EOF\n")
        return samples

    def _prefix_list(self, block: MetricBlock) -> list[str]:
        spec = block.spec
        cached = self._prefixes.get(spec.name)
        if cached is None:
            cached = [spec.sample_name + "{" + ",".join(f'{k}="{v}"' for k, v in labels)
                      for labels in block.labels]
            self._prefixes[spec.name] = cached
        return cached

    def _family(self, block: MetricBlock, chunk: SimChunk, ts: list[str]) -> tuple[str, int]:
        spec = block.spec
        parts = [f"# TYPE {spec.name} {spec.type_word}\n# HELP {spec.name} {spec.help}\n"]
        values = block.values
        ok = ~np.isnan(values)
        if spec.decimals == 0:
            strs = np.where(ok, values, 0).astype(np.int64).tolist()
        else:
            strs = np.round(np.where(ok, values, 0), spec.decimals).tolist()
        prefixes = self._prefix_list(block)
        jobs = chunk.node_job if (self.job_label and spec.per_gpu) else None
        gpn = values.shape[0] // len(chunk.node_names)
        samples = 0
        for r, prefix in enumerate(prefixes):
            row_ok = ok[r]
            if not row_ok.any():
                continue
            row = [str(v) + s for v, s in zip(strs[r], ts, strict=True)]
            if jobs is None:
                groups = [("", row_ok)]
            else:
                jrow = jobs[r // gpn]
                groups = [(f',hpc_job="{chunk.job_ids[j]}"' if j >= 0 else "",
                           row_ok & (jrow == j)) for j in dict.fromkeys(jrow[row_ok].tolist())]
            for extra, mask in groups:
                p = prefix + extra + "} "
                if mask.all():
                    lines = row
                else:
                    lines = [x for x, keep in zip(row, mask.tolist(), strict=True) if keep]
                samples += len(lines)
                parts.append(p)
                parts.append(p.join(lines))
        return "".join(parts), samples


def _syslog_time(t: float) -> str:
    dt = datetime.fromtimestamp(t, tz=UTC)
    return f"{dt:%b} {dt.day:2d} {dt:%H:%M:%S}"


_NOISE = (
    "EXT4-fs (nvme0n1p2): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    "mlx5_core 0000:0c:00.0: mlx5_pcie_event:301:(pid 12): PCIe slot advertised sufficient "
    "power (27W).",
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate "
    "to 79750",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready",
    "systemd-journald[812]: Data hash table of /var/log/journal/system.journal has a fill "
    "level at 75.0 (8535 of 11377 items), suggesting rotation.",
    "TCP: request_sock_TCP: Possible SYN flooding on port 29500. Sending cookies.",
    "nfs: server nfs01 not responding, still trying",
)
_NOISE_P = np.array([0.2, 0.15, 0.15, 0.1, 0.15, 0.2, 0.05])
_NFS_OK = "nfs: server nfs01 OK"
_CRASH_DUMP = ("NVRM: A GPU crash dump has been created. If possible, please run",
               "NVRM: nvidia-bug-report.sh as root to collect this data before",
               "NVRM: the NVIDIA kernel module is unloaded.")


def kernel_logs(sc: Scenario) -> dict[str, list[str]]:
    """Node name -> its kernel log lines in time order (syslog, uptime in brackets)."""
    cfg, fleet = sc.cfg, sc.fleet
    rng = rng_for(cfg.seed, 300)
    events: list[list[tuple[float, str]]] = [[] for _ in range(cfg.nodes)]
    boots: list[list[float]] = [[float(b)] for b in fleet.boot_s]
    for o in sc.outages:
        boot = float(o.end_s - 90)
        boots[o.node].append(boot)
        events[o.node] += [
            (boot + 0.0, "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-007) "
                         "(gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #115-Ubuntu SMP"),
            (boot + 21.4, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                          f"{cfg.driver_version}  Release Build"),
            *[(boot + 23.0 + 0.01 * k, f"NVRM: GPU at PCI:{fleet.pci[k]}: {fleet.uuids[o.node][k]}")
              for k in range(cfg.gpus_per_node)],
        ]
    running = _job_at(sc)
    for f in sc.failures:
        events[f.node] += _failure_lines(sc, f, running(f.node, f.time_s), rng)
    for x in sc.app_xids:
        pid = int(rng.integers(2000, 400000))
        frac = float(rng.uniform(0, 0.9))  # sub-second part: uptime stamps are microseconds
        for node in x.nodes:
            for k, gpu in enumerate(x.gpus):
                events[node].append((x.time_s + frac + 0.001 * k, _xid_line(
                    fleet.pci[gpu], x.xid, f"pid={pid}, name=python", APP_XIDS[x.xid])))
    for b in sc.benign:
        if b.what == "pcie_replay_burst" and b.gpu is not None:
            events[b.node].append((b.start_s + 0.5, _aer_line(fleet.pci[b.gpu])))
    n_noise = int(rng.poisson(3 * cfg.days * cfg.nodes))
    for _ in range(n_noise):
        node = int(rng.integers(cfg.nodes))
        t = float(rng.uniform(cfg.start_s, cfg.end_s))
        k = int(rng.choice(len(_NOISE), p=_NOISE_P))
        events[node].append((t, _NOISE[k]))
        if _NOISE[k].startswith("nfs:"):  # the NFS hiccup recovers
            events[node].append((t + float(rng.uniform(5, 90)), _NFS_OK))
    out: dict[str, list[str]] = {}
    offline = [[(o.start_s, o.end_s - 90) for o in sc.outages if o.node == i]
               for i in range(cfg.nodes)]
    for i, name in enumerate(fleet.node_names):
        lines = []
        bs = sorted(boots[i])
        for t, msg in sorted(events[i]):
            if not cfg.start_s <= t < cfg.end_s or any(a <= t < b for a, b in offline[i]):
                continue
            boot = bs[int(np.searchsorted(bs, t, side="right")) - 1]
            lines.append(f"{_syslog_time(t)} {name} kernel: [{t - boot:12.6f}] {msg}\n")
        out[name] = lines
    return out


def _xid_line(pci: str, xid: int, proc: str, message: str) -> str:
    return f"NVRM: Xid (PCI:{pci[:-2]}): {xid}, {proc}, {message}"


def _aer_line(pci: str) -> str:
    return (f"pcieport 0000:{int(pci[5:7], 16) - 1:02x}:01.0: AER: Corrected error received: "
            f"{pci}")


def _failure_lines(sc: Scenario, f: Failure, job: str | None,
                   rng: np.random.Generator) -> list[tuple[float, str]]:
    fleet = sc.fleet
    proc = (f"pid={int(rng.integers(2000, 400000))}, name=python" if job
            else "pid='<unknown>', name=<unknown>")
    out: list[tuple[float, str]] = []
    if f.precursor == "pcie_replay" and f.precursor_start_s is not None:
        for t in sorted(rng.uniform(f.precursor_start_s, f.time_s, int(rng.integers(1, 8)))):
            out += [(float(t), _aer_line(fleet.pci[g])) for g in f.gpus]
    frac = float(rng.uniform(0, 0.9))
    for k, g in enumerate(f.gpus):
        t = f.time_s + frac + 0.002 * k
        out.append((t, _xid_line(fleet.pci[g], f.xid, proc, f.message)))
        if f.xid == 79:
            out.append((t + 0.0005, f"NVRM: GPU {fleet.pci[g]}: GPU has fallen off the bus."))
    if f.xid in (79, 48, 95, 74):
        t = f.time_s + frac + 0.05
        out += [(t + 1e-4 * k, line) for k, line in enumerate(_CRASH_DUMP)]
    return out


def _job_at(sc: Scenario) -> Callable[[int, float], str | None]:
    by_node: dict[int, list[tuple[int, int, str]]] = {}
    for j in sc.jobs:
        for n in j.nodes:
            by_node.setdefault(n, []).append((j.start_s, j.end_s, j.job_id))

    def running(node: int, t: float) -> str | None:
        # A job cut short by this failure ends exactly at t: it was running.
        return next((jid for s, e, jid in by_node.get(node, []) if s <= t <= e), None)

    return running


def label_records(sc: Scenario) -> list[dict[str, Any]]:
    """The ground truth as JSON-ready dicts, in time order."""
    cfg, fleet = sc.cfg, sc.fleet
    names = fleet.node_names
    running = _job_at(sc)
    recs: list[tuple[float, int, dict[str, Any]]] = []
    for f in sc.failures:
        recs.append((f.time_s, 0, {
            "type": "failure", "node": names[f.node],
            "gpu": None if f.node_level else str(f.gpus[0]),
            "gpus": [str(g) for g in f.gpus], "scope": "node" if f.node_level else "gpu",
            "time": f.time_s, "xid": f.xid, "failure_type": f.failure_type,
            "precursor": f.precursor, "precursor_start": f.precursor_start_s,
            "precursor_magnitude": round(f.magnitude, 3),
            "pci": [fleet.pci[g] for g in f.gpus], "job": running(f.node, f.time_s),
            "vanishes": f.vanishes, "offline_start": (f.time_s + f.drain_s
                                                      if f.repair_s else None),
            "back": f.back_s}))
    for x in sc.app_xids:
        for node in x.nodes:
            recs.append((x.time_s, 1, {"type": "app_xid", "node": names[node], "time": x.time_s,
                                       "xid": x.xid, "job": x.job,
                                       "gpus": [str(g) for g in x.gpus]}))
    for o in sc.outages:
        if o.reason == "maintenance":
            recs.append((o.start_s, 2, {"type": "maintenance", "node": names[o.node],
                                        "start": o.start_s, "end": o.end_s}))
    for b in sc.benign:
        recs.append((b.start_s, 3, {"type": "benign", "node": names[b.node],
                                    "gpu": None if b.gpu is None else str(b.gpu),
                                    "start": b.start_s, "end": b.end_s, "what": b.what,
                                    "magnitude": round(b.magnitude, 3), "job": b.job}))
    for g in sc.gaps:
        recs.append((g.start_s, 4, {"type": "scrape_gap", "node": names[g.node],
                                    "start": g.start_s, "end": g.end_s}))
    for j in sc.jobs:
        if j.end_s > cfg.start_s:
            recs.append((j.start_s, 5, {
                "type": "job", "job": j.job_id, "nodes": [names[i] for i in j.nodes],
                "start": j.start_s, "end": j.end_s, "end_reason": j.end_reason,
                "intensity": round(j.intensity, 3), "restart_of": j.restart_of}))
    recs.sort(key=lambda r: (r[0], r[1], json.dumps(r[2], sort_keys=True)))
    return [r[2] for r in recs]


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    buf = io.StringIO()
    for rec in records:
        buf.write(json.dumps(rec, separators=(",", ":")) + "\n")
    path.write_text(buf.getvalue(), encoding="utf-8")
