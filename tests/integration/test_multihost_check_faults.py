"""Issue 26, section 4, on the namespaced cluster: `trainguard check` fails a host whose
checkpoint dir does not work (a full tmpfs mounted over it in that host's mount namespace, a
missing dir, a read-only mount) and passes the others; hosts that share the kernel's clock read
about 0 ms, well inside a 50 ms limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multihost_job import _unavailable, no_job_left  # noqa: F401 (fixture)

from trainguard.devcluster import HostCluster, missing_requirements

pytestmark = [pytest.mark.integration, pytest.mark.multihost,
              pytest.mark.usefixtures("no_job_left")]

TG = [sys.executable, "-m", "trainguard.cli.main"]
HOSTS = [f"host{i}" for i in range(1, 6)]
CKPT = "/tmp/ckpt"
"""Each host's own /tmp (a tmpfs of its mount namespace)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements()
    if missing:
        _unavailable(f"missing: {', '.join(missing)}")
    root = tmp_path_factory.mktemp("mhcf")
    with HostCluster(HOSTS, root / "cluster") as c:
        yield c


def sh(cluster: HostCluster, host: str, script: str) -> None:
    r = cluster.run(host, ["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (host, script, r.stderr)


def check(cluster: HostCluster, *extra: str) -> tuple[int, dict[str, Any], str]:
    argv = [*TG, "check", "--nodes", ",".join(HOSTS), "--json",
            "--agent-exec", f"{cluster.enter_script} {{node}}",
            "--controller-addr", cluster.bridge_addr, "--time-limit", "10",
            "--checkpoint-dir", CKPT, "--probe", "storage", "--no-links", "--no-collective",
            "--max-clock-offset", "0.05", *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).parents[2])
    assert r.returncode in (0, 1), r.stderr[-3000:]
    return r.returncode, json.loads(r.stdout), r.stderr


def failed(report: dict[str, Any]) -> dict[str, list[str]]:
    """Host -> the reasons of its failed findings."""
    out: dict[str, list[str]] = {}
    for f in report["findings"]:
        if f["level"] in ("slow", "fail"):
            out.setdefault(f["subject"], []).append(f["reason"])
    return out


def _clocks_read_zero(report: dict[str, Any]) -> None:
    clocks = [f for f in report["findings"] if f["check"] == "clock"]
    assert sorted(f["subject"] for f in clocks) == HOSTS
    for f in clocks:  # one kernel clock: about 0 ms, and a 50 ms limit holds
        assert f["level"] == "pass", f
        assert abs(f["value"]) < 10.0, f


def test_a_full_checkpoint_dir_fails_its_host_and_only_it(cluster: HostCluster) -> None:
    for host in HOSTS:
        sh(cluster, host, f"mkdir -p {CKPT}")
    sh(cluster, "host2", f"mount -t tmpfs -o size=64k tgfull {CKPT} && "
       f"(dd if=/dev/zero of={CKPT}/fill bs=4k 2>/dev/null; true)")
    try:
        code, report, err = check(cluster)
    finally:
        sh(cluster, "host2", f"umount {CKPT}")
    assert code == 1, err[-2000:]
    bad = failed(report)
    assert list(bad) == ["host2"], (bad, err[-2000:])
    assert any("ENOSPC" in r for r in bad["host2"]), bad
    assert report["verdicts"] == {h: "fail" if h == "host2" else "pass" for h in HOSTS}
    _clocks_read_zero(report)


def test_a_missing_or_read_only_checkpoint_dir_fails_its_host(cluster: HostCluster) -> None:
    for host in HOSTS:
        sh(cluster, host, f"mkdir -p {CKPT}")
    sh(cluster, "host3", f"rmdir {CKPT}")
    sh(cluster, "host4", f"mount -t tmpfs -o ro,size=64k tgro {CKPT}")
    try:
        code, report, err = check(cluster)
    finally:
        sh(cluster, "host4", f"umount {CKPT}")
        sh(cluster, "host3", f"mkdir -p {CKPT}")
    assert code == 1, err[-2000:]
    bad = failed(report)
    assert sorted(bad) == ["host3", "host4"], (bad, err[-2000:])
    assert any("does not exist" in r for r in bad["host3"]), bad
    assert any("EROFS" in r or "not writable" in r for r in bad["host4"]), bad


def test_a_healthy_cluster_passes_storage_and_clocks(cluster: HostCluster) -> None:
    for host in HOSTS:
        sh(cluster, host, f"mkdir -p {CKPT}")
    code, report, err = check(cluster)
    assert code == 0 and report["flagged"] == [], (failed(report), err[-2000:])
    _clocks_read_zero(report)
