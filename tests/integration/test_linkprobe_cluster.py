"""The link probe and the pairing scheme on the namespaced dev cluster: real veths through a
bridge, one host throttled with tc to a tenth of the healthy rate. Needs root; skips otherwise
(fails under CI=true)."""

from __future__ import annotations

import json
import os
import secrets
import selectors
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.check.linkprobe import DEFAULT_NBYTES
from trainguard.check.pairing import Isolator, Pair
from trainguard.devcluster import HostCluster, missing_requirements

pytestmark = [pytest.mark.integration, pytest.mark.multihost]
NBYTES = DEFAULT_NBYTES
# One per host, like its agent: JSON commands on stdin, one JSON answer per line.
WORKER = """
import json, sys
from trainguard.check.linkprobe import LinkServer, measure
servers = []
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "serve":
        srv = LinkServer("0.0.0.0", cmd["token"], timeout_s=30.0).start()
        servers.append(srv)
        out = {"port": srv.port}
    else:
        out = measure(cmd["addr"], cmd["port"], cmd["token"], host=cmd["host"],
                      peer=cmd["peer"], nbytes=cmd["nbytes"], timeout_s=10.0).to_dict()
    print(json.dumps(out), flush=True)
for srv in servers:
    srv.close()
"""


class _Workers:
    def __init__(self, cluster: HostCluster) -> None:
        self.addr = {h.name: h.addr for h in cluster.hosts}
        self.procs = {h.name: cluster.popen(h.name, [sys.executable, "-c", WORKER],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True) for h in cluster.hosts}

    def ask(self, host: str, cmd: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        proc = self.procs[host]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(timeout_s), f"{host}: no answer in {timeout_s} s"
            answer: dict[str, Any] = json.loads(proc.stdout.readline())
            return answer

    def measure_round(self, pairs: list[Pair]) -> dict[Pair, float | None]:
        token = secrets.token_hex(16)
        ports = {(a, b): self.ask(b, {"op": "serve", "token": token})["port"] for a, b in pairs}
        out: dict[Pair, float | None] = {}

        def one(a: str, b: str) -> None:
            r = self.ask(a, {"op": "measure", "addr": self.addr[b], "port": ports[(a, b)],
                             "token": token, "host": a, "peer": b, "nbytes": NBYTES})
            figs = {f["name"]: f["value"] for f in r["figures"]}
            out[(a, b)] = figs.get("link_mbps")

        threads = [threading.Thread(target=one, args=p) for p in pairs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return out

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[HostCluster, _Workers]]:
    reasons = missing_requirements()
    if reasons:
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail("; ".join(reasons), pytrace=False)
        pytest.skip("; ".join(reasons))
    with HostCluster(4, tmp_path / "c", prefix="tglp") as cluster:
        w = _Workers(cluster)
        try:
            yield cluster, w
        finally:
            w.stop()


def _isolate(w: _Workers, hosts: list[str]) -> tuple[Isolator, list[dict[Pair, float | None]]]:
    iso = Isolator(hosts)
    rounds = []
    while (pairs := iso.next_round()) is not None:
        rounds.append(w.measure_round(pairs))
        iso.record(rounds[-1])
    return iso, rounds


def test_healthy_hosts_then_one_throttled_host(workers: tuple[HostCluster, _Workers]) -> None:
    cluster, w = workers
    hosts = [h.name for h in cluster.hosts]
    healthy: list[float] = []
    for _ in range(3):
        iso, rounds = _isolate(w, hosts)
        assert iso.findings() == [], rounds
        healthy += [v for r in rounds for v in r.values() if v is not None]
    # A tenth of the healthy rate (MB/s -> Mbit/s x 8).
    bad = hosts[2]
    cluster.throttle(bad, statistics.median(healthy) * 8 / 10)
    iso, rounds = _isolate(w, hosts)
    assert [(f.subject, f.kind) for f in iso.findings()] == [(bad, "host")], rounds
    assert len(rounds) == 2
