"""The watch service against an in-memory Prometheus (fakeprom.py) on a driven clock: live alerts
equal the offline detector's on the same data, restarts lose and duplicate nothing, a Prometheus
outage costs rounds, not alerts; deliveries to the store and Alertmanager are retried."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from fakeprom import FakePrometheus

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import detect
from trainguard.simulate import SimConfig
from trainguard.simulate.serve import LiveExporter
from trainguard.store import Store
from trainguard.telemetry.builder import TelemetryBuilder
from trainguard.telemetry.prometheus import PrometheusClient, read_prometheus
from trainguard.watch.actions import ActionExecutor, ActionPolicy
from trainguard.watch.alertmanager import AlertmanagerClient
from trainguard.watch.alerts import Change
from trainguard.watch.config import WatchConfig
from trainguard.watch.service import WatchService
from trainguard.watch.state import FULL_NAME, JSON_NAME, load_state

SIM = SimConfig(nodes=6, gpus_per_node=2, days=0.1, seed=2, failures_per_day=6,
                maintenances_per_day=0, benign_per_day=0, scrape_gaps_per_day=0,
                app_xids_per_day=0, no_precursor_fraction=0)
"""Within 6300 s: an XID on node01 (2520 s), a predictive alert on node03 (3570 s) ahead of its
XID (5580 s)."""
DET = DetectorConfig(warmup_s=1800)
T0 = float(SIM.start_s)
END = T0 + 6300
ROUND_S = 90.0
URL = "http://prom.test:9090"


@dataclass
class Rig:
    prom: FakePrometheus
    state_dir: Path
    now: float = T0 + 1200
    changes: list[Change] = field(default_factory=list)
    posted: list[list[dict[str, object]]] = field(default_factory=list)
    am_up: bool = True

    def client(self) -> PrometheusClient:
        return PrometheusClient(URL, transport=self.prom.transport, retries=0)

    def am_transport(self, url: str, body: bytes, headers: object, timeout: float) -> int:
        if not self.am_up:
            raise ConnectionError("refused")
        self.posted.append(json.loads(body))
        return 200

    def service(self, **kw: object) -> WatchService:
        cfg = WatchConfig(prometheus=URL, detect=DET, history_s=1200, state_dir=self.state_dir)
        svc = WatchService(cfg, client=self.client(), clock=lambda: self.now,
                           on_change=self.changes.append, **kw)  # type: ignore[arg-type]
        svc.load()
        return svc

    def run(self, svc: WatchService, until: float) -> None:
        while self.now < until:
            self.prom.advance(self.now)
            svc.round()
            self.now += ROUND_S

    def fired(self) -> list[tuple[str, str, float]]:
        return [(c.alert.node, c.alert.kind, c.alert.start) for c in self.changes
                if c.kind == "fired"]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    exporter = LiveExporter.from_config(SIM, 1.0, clock=lambda: T0)
    return Rig(FakePrometheus(exporter), tmp_path / "state")


def offline(rig: Rig, first_t: int, end: float) -> list[AlertEpisode]:
    """`trainguard detect --prometheus` on the same server: one batch over everything."""
    b = TelemetryBuilder(step_s=30)
    read_prometheus(rig.client(), b, start=T0, end=end, step_s=30, align=False)
    return detect(b.build().slice_time(first_t, int(end) + 30), DET)


def test_live_alerts_equal_the_offline_detector_on_the_same_data(rig: Rig) -> None:
    svc = rig.service()
    rig.run(svc, END)
    scored_to = svc.state.cursor - 30  # type: ignore[operator]
    assert svc.state.first_t == T0
    expected = offline(rig, svc.state.first_t, scored_to)
    assert [(e.node, e.kind.value) for e in expected] == [
        ("node01", "hard"), ("node03", "predictive"), ("node03", "hard")]
    assert sorted(rig.fired()) == sorted((e.node, e.kind.value, e.start) for e in expected)
    resolved = {(c.alert.node, c.alert.kind, c.alert.start): c.alert.end for c in rig.changes
                if c.kind == "resolved"}
    for e in expected:
        if e.end < scored_to - DET.cooldown_s:
            assert resolved[(e.node, e.kind.value, e.start)] == e.end
    # /metrics' view: node scores and the alerts still open
    snap = svc.snapshot(rig.now)
    assert set(snap.node_scores) == set(SIM.node_names)
    assert snap.alerts_total == {"critical": 2, "warning": 1}
    # node01's XID episode ended a hard cool-down (3600 s) after its evidence
    assert {(a.node, a.kind) for a in snap.open_alerts} == {("node03", "hard")}


def test_each_round_scores_only_the_new_points(rig: Rig) -> None:
    svc = rig.service()
    rig.prom.advance(rig.now)
    first = svc.round()
    assert first.samples > 0
    rig.now += ROUND_S
    rig.prom.advance(rig.now)
    det = svc.detector
    before = det.samples  # type: ignore[union-attr]
    second = svc.round()
    # 90 s of new points: 3 steps of every series, nothing fetched twice
    assert det.samples - before == second.samples > 0  # type: ignore[union-attr]
    assert second.fetched_to - first.fetched_to == ROUND_S  # type: ignore[operator]
    assert second.samples < first.samples / 10  # 3 new steps against the 41 of the warm-up


@pytest.mark.parametrize("damage", ["none", "pickle"])
def test_a_restart_mid_stream_loses_no_alert_and_repeats_none(rig: Rig, damage: str) -> None:
    svc = rig.service()
    rig.run(svc, T0 + 3000)  # after node01's XID, before node03's precursor alert
    assert rig.fired() == [("node01", "hard", T0 + 2520)]
    del svc  # killed: nothing more is saved
    rig.now += 1500  # down for 25 minutes; node03's alert (3570 s) falls inside
    if damage == "pickle":
        (rig.state_dir / FULL_NAME).write_bytes(b"{\"format\": garbage")
    svc2 = rig.service()
    assert ("warming up again" in svc2.note) == (damage == "pickle")
    rig.run(svc2, END)
    fired = rig.fired()
    assert len(fired) == len(set(fired))
    assert sorted(fired) == [("node01", "hard", T0 + 2520), ("node03", "hard", T0 + 5580),
                             ("node03", "predictive", T0 + 3570)]


def test_prometheus_down_costs_rounds_not_alerts(rig: Rig) -> None:
    svc = rig.service()
    rig.run(svc, T0 + 3000)
    cursor = svc.state.cursor
    rig.prom.down = True
    for _ in range(4):
        rig.prom.advance(rig.now)  # the exporter keeps being scraped meanwhile
        report = svc.round()
        assert report.fetched_to is None and report.errors
        rig.now += ROUND_S
    assert svc.state.cursor == cursor
    assert svc.state.errors_total["query"] == 4
    rig.prom.down = False
    rig.run(svc, END)
    assert ("node03", "predictive", T0 + 3570) in rig.fired()


def test_a_warm_up_reports_what_it_found_in_history_and_pages_only_what_is_open(
        rig: Rig, tmp_path: Path) -> None:
    """A first start at END with the whole scenario as history: node01's XID episode (closed a
    hard cool-down after 2520 s) is history: stored, reported as fired with historical=True,
    listed under /status' history, never posted to Alertmanager; what is still open is live."""
    rig.now = END
    rig.prom.advance(rig.now)
    with Store.open(str(tmp_path / "tg.db")) as store:
        am = AlertmanagerClient("http://am.test:9093", transport=rig.am_transport, retries=0)
        cfg = WatchConfig(prometheus=URL, detect=DET, history_s=END - T0,
                          state_dir=rig.state_dir)
        svc = WatchService(cfg, client=rig.client(), clock=lambda: rig.now, store=store,
                           alertmanager=am, on_change=rig.changes.append)
        svc.load()
        report = svc.round()
        stored = {(a.node, a.kind, a.start) for a in store.alerts()}
    assert not report.errors
    history = [c.alert for c in rig.changes if c.kind == "fired" and c.alert.historical]
    live = [c.alert for c in rig.changes if c.kind == "fired" and not c.alert.historical]
    assert ("node01", "hard", T0 + 2520) in {(a.node, a.kind, a.start) for a in history}
    assert all(a.end is not None for a in history) and all(a.end is None for a in live)
    # everything is stored; only the live alerts reach Alertmanager and the counters
    assert stored == {(a.node, a.kind, a.start) for a in history + live}
    posted = {(x["labels"]["node"], x["labels"]["kind"]) for batch in rig.posted for x in batch}
    assert ("node01", "hard") not in posted
    assert posted == {(a.node, a.kind) for a in live}
    assert sum(svc.state.alerts_total.values()) == len(live)
    status = svc.status()
    assert {(a["node"], a["start"]) for a in status["history"]} == {
        (a.node, a.start) for a in history}


def test_store_and_alertmanager_get_each_alert_once_and_failed_posts_are_retried(
        rig: Rig, tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "tg.db")) as store:
        am = AlertmanagerClient("http://am.test:9093", transport=rig.am_transport, retries=0)
        svc = rig.service(store=store, alertmanager=am)
        rig.am_up = False
        rig.run(svc, T0 + 2700)  # node01's XID is raised while Alertmanager is down
        assert rig.fired() == [("node01", "hard", T0 + 2520)]
        assert not rig.posted and svc.state.errors_total["alertmanager"] >= 1
        rig.am_up = True
        rig.run(svc, T0 + 2900)
        starts = [a["startsAt"] for batch in rig.posted for a in batch
                  if a["labels"]["node"] == "node01"]  # type: ignore[index]
        assert starts and set(starts) == {"2024-11-18T00:42:00.000Z"}
        del svc
        svc = rig.service(store=store, alertmanager=am)  # restart: nothing stored twice
        rig.run(svc, END)
        rows = [(a.node, a.kind, a.start, a.source) for a in store.alerts()]
        assert sorted(rows) == [("node01", "hard", T0 + 2520, "trainguard-watch"),
                                ("node03", "hard", T0 + 5580, "trainguard-watch"),
                                ("node03", "predictive", T0 + 3570, "trainguard-watch")]
        pred = next(a for a in store.alerts() if a.kind == "predictive")
        assert pred.end is not None and pred.end > pred.start  # resolved in the store too


def test_actions_run_once_per_alert_and_their_limits_survive_a_restart(
        rig: Rig, tmp_path: Path) -> None:
    policy = ActionPolicy(enabled=True, dry_run=True, max_nodes_per_hour=1, pool_size=6,
                          max_pool_fraction=0.5)
    notify = tmp_path / "alerts.jsonl"
    ex = ActionExecutor(policy, pool=SIM.node_names, alerts_file=notify, clock=lambda: rig.now)
    svc = rig.service(executor=ex)
    rig.run(svc, T0 + 3000)
    # node01's XID: one dry-run decision (the supervisor would be told), the hourly budget used
    assert svc.state.actions_total == {"notify/dry_run": 1}
    assert len(svc.state.actions["granted"]) == 1
    del svc
    ex2 = ActionExecutor(policy, pool=SIM.node_names, alerts_file=notify, clock=lambda: rig.now)
    svc2 = rig.service(executor=ex2)
    assert ex2.limiter.granted_last_hour() == 1  # restored, not reset
    rig.run(svc2, END)  # node03's XID within the hour: rate limited, not acted on
    assert svc2.state.actions_total == {"notify/dry_run": 1, "exclude/rate_limited": 1}
    assert not notify.exists()  # dry-run wrote nothing


def test_state_files_are_readable_and_an_old_pickle_is_never_loaded(rig: Rig) -> None:
    svc = rig.service()
    rig.run(svc, T0 + 2700)
    doc = json.loads((rig.state_dir / JSON_NAME).read_text())
    assert doc["cursor"] == svc.state.cursor and doc["alerts"][0]["node"] == "node01"
    marker = rig.state_dir / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            import os
            return (os.system, (f"touch {marker}",))

    (rig.state_dir / FULL_NAME).unlink()
    legacy = rig.state_dir / "state.pkl"
    legacy.write_bytes(pickle.dumps({"version": 1, "detector": Evil()}))
    loaded = load_state(rig.state_dir)
    assert not marker.exists()
    assert loaded.detector is None and "state.pkl is from an older trainguard" in loaded.note
    assert loaded.state is not None and loaded.state.cursor == svc.state.cursor
    svc2 = rig.service()
    rig.run(svc2, rig.now + ROUND_S)  # the next save removes the old pickle
    assert not legacy.exists() and not marker.exists()


def test_replayed_time_maps_prometheus_time_to_simulated_time(rig: Rig) -> None:
    from trainguard.watch.config import TimeMap

    tm = TimeMap(speed=60, sim_start=T0, wall_start=1_000_000.0, phase_s=0.45)
    for t in (T0, T0 + 30, T0 + 3570):
        assert tm.to_det(tm.to_prom(t)) == pytest.approx(t)
    assert tm.to_prom(T0 + 60) == pytest.approx(1_000_000.0 + 1 + 0.45)
    assert not tm.identity and TimeMap().identity


def _iter_changes(changes: list[Change]) -> Iterator[str]:
    for c in changes:
        yield f"{c.kind} {c.alert.node}"


def test_the_json_state_alone_lists_what_was_raised(rig: Rig) -> None:
    svc = rig.service()
    rig.run(svc, T0 + 2700)
    (rig.state_dir / FULL_NAME).unlink()
    loaded = load_state(rig.state_dir)
    assert loaded.state is not None and loaded.detector is None
    assert [a.node for a in loaded.state.alerts.values()] == ["node01"]
    assert list(_iter_changes(rig.changes)) == ["fired node01"]
    # no store, no Alertmanager, no actions: decided, and said to be none of the rest
    assert [(a.decided, a.stored, a.sent, a.acted) for a in loaded.state.alerts.values()] == [
        (True, False, False, False)]


def test_stored_sent_and_acted_say_what_really_happened(rig: Rig, tmp_path: Path) -> None:
    """Each flag is true only when that output exists and took the alert: no store, no
    Alertmanager, actions off is false, false, false (and nothing is retried); a dry run is not
    an action that ran; a refused post is not sent until Alertmanager accepts it."""
    bare = rig.service()
    rig.run(bare, T0 + 2700)
    [alert] = [c.alert for c in rig.changes if c.kind == "fired"]
    assert (alert.stored, alert.sent, alert.acted) == (False, False, False)
    assert json.loads(json.dumps(alert.to_dict()))["sent"] is False
    assert not bare.state.errors_total
    live = ActionPolicy(enabled=True, dry_run=False, pool_size=6, max_pool_fraction=0.5)
    for dry_run, expected_acted in ((False, True), (True, False)):
        rig.changes.clear()
        rig.posted.clear()
        rig.now = T0 + 1200
        rig.state_dir = tmp_path / f"state-{dry_run}"
        with Store.open(str(tmp_path / f"tg-{dry_run}.db")) as store:
            am = AlertmanagerClient("http://am.test:9093", transport=rig.am_transport,
                                    retries=0)
            ex = ActionExecutor(replace(live, dry_run=dry_run), pool=SIM.node_names,
                                store=store, clock=lambda: rig.now)
            svc = rig.service(store=store, alertmanager=am, executor=ex)
            rig.am_up = False
            rig.run(svc, T0 + 2700)
            [fired] = [c.alert for c in rig.changes if c.kind == "fired"]
            assert (fired.stored, fired.sent, fired.acted) == (True, False, expected_acted)
            assert fired.store_id is not None
            rig.am_up = True
            rig.run(svc, T0 + 2800)
            [now] = [a for a in svc.state.alerts.values() if a.node == "node01"]
            assert (now.stored, now.sent, now.acted) == (True, True, expected_acted)
            assert rig.posted


def test_kernel_log_xids_become_evidence_and_one_hard_alert(rig: Rig, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from trainguard.evidence.rules import load_rules
    from trainguard.watch.kernlog import KernelLogTailer, parse_sources

    log_file = tmp_path / "kern.log"
    log_file.write_text("")
    tailer = KernelLogTailer(parse_sources([f"node02={log_file}"]), load_rules(), from_end=True)
    with Store.open(str(tmp_path / "tg.db")) as store:
        svc = rig.service(store=store, kernel_logs=tailer)
        rig.run(svc, T0 + 1500)
        stamp = datetime.fromtimestamp(rig.now, UTC).isoformat()
        xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
        with open(log_file, "a") as f:  # twice: the second joins the first alert
            f.write(f"{stamp} node02 kernel: {xid}\n{stamp} node02 kernel: {xid}\n")
        rig.run(svc, T0 + 1700)
        events = store.events(host="node02")
        assert [e.xid for e in events] == [79, 79]
        kernel = [c.alert for c in rig.changes if c.alert.source == "kernel-log"]
        assert [(a.node, a.kind, a.start) for a in kernel] == [("node02", "hard", rig.now - 180)]
        assert ("node02", "hard", rig.now - 180, "trainguard-watch:kernel-log") in {
            (a.node, a.kind, a.start, a.source) for a in store.alerts()}
        del svc
        with open(log_file, "a") as f:  # written while the watch is down: read after it
            f.write(f"{stamp} node02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, "
                    "Graphics Exception\n")
        tailer = KernelLogTailer(parse_sources([f"node02={log_file}"]), load_rules(),
                                 from_end=True)
        svc = rig.service(store=store, kernel_logs=tailer)  # restart: the old lines not again
        rig.run(svc, T0 + 1900)
        assert [e.xid for e in store.events(host="node02")] == [79, 79, 13]


def test_history_whose_store_write_failed_is_stored_later_and_still_never_paged(
        rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.errors import StoreError

    rig.now = END
    rig.prom.advance(rig.now)
    with Store.open(str(tmp_path / "tg.db")) as store:
        real_add = store.add_alert
        locked = [True]

        def add_alert(**kw: object) -> int:
            if locked[0]:
                raise StoreError("database is locked")
            return real_add(**kw)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "add_alert", add_alert)
        am = AlertmanagerClient("http://am.test:9093", transport=rig.am_transport, retries=0)
        cfg = WatchConfig(prometheus=URL, detect=DET, history_s=END - T0,
                          state_dir=rig.state_dir)
        svc = WatchService(cfg, client=rig.client(), clock=lambda: rig.now, store=store,
                           alertmanager=am, executor=None, on_change=rig.changes.append)
        svc.load()
        assert any(e.startswith("store:") for e in svc.round().errors)
        locked[0] = False
        rig.now += ROUND_S
        rig.prom.advance(rig.now)
        assert not svc.round().errors
        stored = {(a.node, a.kind, a.start) for a in store.alerts()}
    history = {(a.node, a.kind, a.start) for a in svc.state.alerts.values() if a.historical}
    assert ("node01", "hard", T0 + 2520) in history and history <= stored
    posted = {(x["labels"]["node"], x["labels"]["kind"]) for batch in rig.posted for x in batch}
    assert ("node01", "hard") not in posted
    assert all(not a.sent and not a.acted for a in svc.state.alerts.values() if a.historical)
