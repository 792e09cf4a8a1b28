"""The `trainguard watch` loop: Prometheus in, alerts out, state kept across restarts.

Each round (every `interval_s` wall seconds):

1. fetch the new points since the cursor, up to now minus the lag (the newest scrape must have
   landed), at the detector step, in chunks of at most `max_chunk_s` (a first start fetches
   `history_s` of history to warm up; a restart fetches what it missed);
2. feed them to the streaming detector: only the new blocks are scored (no recomputation);
3. reconcile the detector's episodes with the alerts raised so far (`watch.alerts`);
4. save the state (before delivering: a crash re-delivers, it never forgets);
5. deliver what is due: the store, Alertmanager, the actions (each idempotent), then save again;
6. poll the kernel logs, refresh `/metrics`, re-post the open alerts when due.

A Prometheus that is down or restarting costs a round (counted in
``trainguard_watch_errors_total{stage="query"}``), not the service: the cursor stays and the
next round fetches the whole span. Points Prometheus never scraped are gaps to the detector.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trainguard.detect.alerts import AlertKind
from trainguard.detect.clustersize import cluster_size, size_note
from trainguard.detect.detector import Detector
from trainguard.errors import TelemetryError, TrainguardError
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.store import Store
from trainguard.taxonomy import Action, Severity
from trainguard.telemetry.builder import TelemetryBuilder
from trainguard.telemetry.frame import MetricKind, Telemetry
from trainguard.telemetry.identity import IdentityConfig
from trainguard.telemetry.prometheus import (
    NotPrometheus,
    PrometheusClient,
    PrometheusUnreachable,
    metric_kinds,
    read_prometheus,
)
from trainguard.timeparse import parse_duration
from trainguard.watch import alertmanager as am
from trainguard.watch.actions import ActionExecutor, Outcome
from trainguard.watch.actions import NodeAlert as ActionAlert
from trainguard.watch.alerts import Change, confidence, reconcile
from trainguard.watch.config import WatchConfig
from trainguard.watch.exporter import MetricsExporter, MetricsSnapshot, OpenAlert
from trainguard.watch.kernlog import KernelLogTailer
from trainguard.watch.replaygrid import ReplayGrid
from trainguard.watch.roundreport import RoundReport, iso, warmup_blocks
from trainguard.watch.state import LiveAlert, WatchState, load_state, prepare_dir, save_state

__all__ = ["RoundReport", "WatchService", "severity_of"]

log = logging.getLogger(__name__)

_NODE_ACTIONS = (Action.EXCLUDE_NODE, Action.REBOOT_NODE, Action.RESET_GPU)
"""Kernel-log evidence that raises a hard alert (the rest is stored as evidence only)."""
KERNEL_SOURCE = "kernel-log"
STORE_SOURCE = "trainguard-watch"
DEFAULT_STEP_S = 30
"""The detector step when neither --step, the saved state nor Prometheus' targets name one."""


def _rate_annotations(alert: LiveAlert) -> dict[str, str]:
    """The calibrated false-alarm rate of the alert's kind, and its 95% upper bound."""
    if alert.expected_fp_per_day is None:
        return {}
    ann = {"expected_fp_per_day": f"{alert.expected_fp_per_day:.3g}",
           "expected_fp_per_nodes": str(alert.expected_fp_per_nodes)}
    if alert.expected_fp_per_day_upper95 is not None:
        ann["expected_fp_per_day_upper95"] = f"{alert.expected_fp_per_day_upper95:.3g}"
    return ann


def severity_of(kind: str) -> str:
    """Alertmanager severity of an alert kind: hard evidence pages, a prediction warns."""
    return "critical" if kind == AlertKind.HARD.value else "warning"


class WatchService:
    """The live detector service (see the module docstring).

        >>> svc = WatchService(cfg, client=PrometheusClient(cfg.prometheus))  # doctest: +SKIP
        >>> svc.load()                                                          # doctest: +SKIP
        >>> svc.run(stop_event)                                                 # doctest: +SKIP

    Everything with side effects is injected: the Prometheus client, the store, the
    Alertmanager client, the action executor, the kernel-log tailer, the metrics exporter and
    the wall clock. `on_change` sees every alert change after its delivery; `on_note` gets the
    one-line note, once, when the calibration was tuned on a cluster of another size.
    """

    def __init__(self, cfg: WatchConfig, *, client: PrometheusClient,
                 store: Store | None = None, alertmanager: am.AlertmanagerClient | None = None,
                 executor: ActionExecutor | None = None,
                 kernel_logs: KernelLogTailer | None = None,
                 exporter: MetricsExporter | None = None,
                 clock: Callable[[], float] = time.time,
                 on_change: Callable[[Change], None] | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 on_note: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.client = client
        self.store = store
        self.alertmanager = alertmanager
        self.executor = executor
        self.kernel_logs = kernel_logs
        self.exporter = exporter
        self.clock = clock
        self.on_change = on_change
        self.progress = progress
        self.on_note = on_note
        self.size_note: str | None = None
        """Set on the first telemetry of this process (see `on_note`)."""
        self._size_checked = cfg.calibration is None
        self.state = WatchState()
        self.detector: Detector | None = None
        self.step_s = cfg.step_s or DEFAULT_STEP_S
        self.step_assumed = False
        """No step was given or saved and Prometheus did not answer: `step_s` is the default
        until it does (read again before anything is fetched), and is not saved before."""
        self.note = ""
        self._names: list[str] | None = None
        self._kinds: dict[str, MetricKind] = {}
        self._discovered_at = -math.inf
        self._resent_at = -math.inf
        self._lock = threading.Lock()

    # -- start-up ---------------------------------------------------------------------------
    def load(self) -> str:
        """Read the saved state (if any) and fix the step; returns what happened, in words."""
        prepare_dir(self.cfg.state_dir)
        loaded = load_state(self.cfg.state_dir)
        self.note = loaded.note
        if loaded.state is not None:
            self.state = loaded.state
            if loaded.detector is not None:
                self.detector = loaded.detector
            else:
                self._rewind_for_rewarm()
        saved_step = self.state.step_s
        learned = None if self.cfg.step_s or saved_step else self._scrape_step()
        self.step_s = self.cfg.step_s or saved_step or learned or DEFAULT_STEP_S
        self.step_assumed = not (self.cfg.step_s or saved_step or learned)
        if saved_step is not None and saved_step != self.step_s:
            # The saved detector works on the old grid: learn again, keep the alerts.
            self.note += (f"; step changed from {saved_step} s to {self.step_s} s: warming up "
                          "again from history")
            self.detector = None
            self._rewind_for_rewarm()
        if not self.step_assumed:
            self.state.step_s = self.step_s
        if self.kernel_logs is not None:
            self.kernel_logs.restore(self.state.kernel_logs)
        if self.executor is not None:
            self.executor.restore(self.state.actions)
        return self.note

    def _rewind_for_rewarm(self) -> None:
        """Without a usable detector: warm up again on the history before the cursor; the
        alerts already raised keep their keys, so none is raised twice."""
        if self.state.cursor is not None:
            self.state.warm_until = self.state.cursor
            self.state.cursor = None

    @property
    def step_words(self) -> str:
        """The step, and whether it is only assumed for now, for people."""
        if self.step_assumed:
            return (f"step {self.step_s}s until Prometheus answers (then its scrape "
                    "interval)")
        return f"step {self.step_s}s"

    def _scrape_step(self) -> int | None:
        """Detector step from the scrape interval of Prometheus' targets (x the replay speed);
        30 s when Prometheus does not say; None when it did not answer at all."""
        try:
            data = self.client.get("/api/v1/targets", {"state": "active"})
            intervals = [_seconds(t.get("scrapeInterval", ""))
                         for t in (data or {}).get("activeTargets", [])]
        except (PrometheusUnreachable, NotPrometheus):
            return None
        except (TelemetryError, AttributeError, TypeError):
            log.info("watch: cannot read the scrape interval from Prometheus; step %d s",
                     DEFAULT_STEP_S)
            return DEFAULT_STEP_S
        found = [i for i in intervals if i is not None and i > 0]
        if not found:
            return DEFAULT_STEP_S
        return max(1, round(min(found) * self.cfg.replay.speed))

    def _settle_step(self) -> None:
        """Read the scrape interval again while the step is only assumed; once it is known, or
        once data was scored on the assumed step, the step is the state's."""
        st = self.state
        fresh = st.first_t is None and self.detector is None
        learned = self._scrape_step() if fresh else self.step_s
        if learned is None:
            return
        if learned != self.step_s:
            # Nothing was fetched yet: the first round's window starts again on the new grid.
            st.cursor = st.warm_until = None
        self.step_s = learned
        self.step_assumed = False
        st.step_s = learned

    # -- one round --------------------------------------------------------------------------
    def round(self) -> RoundReport:
        """Fetch, score, reconcile and deliver once (see the module docstring)."""
        with self._lock:
            return self._round()

    def _round(self) -> RoundReport:
        errors: list[str] = []
        if self.step_assumed:
            self._settle_step()
        now = self.clock()
        tm = self.cfg.replay
        step = self.step_s
        lag = self.cfg.lag_s if self.cfg.lag_s is not None else min(10.0, step / tm.speed / 5)
        newest = math.floor(tm.to_det(now - lag) / step) * step
        st = self.state
        if st.cursor is None:
            begin = newest - math.floor(self.cfg.history_s / step) * step
            if st.warm_until is not None:
                # A re-warm: learn again on what came before the old cursor, as far back as
                # twice the detector's own warm-up (never before the first start's history).
                back = max(self.cfg.history_s, 2 * self.cfg.detect.warmup_s)
                begin = min(begin, st.warm_until - math.floor(back / step) * step)
                if st.first_t is not None:
                    begin = max(begin, st.first_t)
            else:
                st.warm_until = newest + step
            st.cursor = begin
        samples = 0
        fetched_to: int | None = None
        changes: list[Change] = []
        total = max(1, newest + step - st.cursor)
        begin_cursor = st.cursor
        unusable: str | None = None
        while st.cursor <= newest:
            hi = min(newest, st.cursor + max(step, int(self.cfg.max_chunk_s // step) * step)
                     - step)
            try:
                tel = self._fetch(st.cursor, hi)
            except TrainguardError as exc:
                st.count_error("query")
                errors.append(f"query: {exc}")
                if isinstance(exc, PrometheusUnreachable | NotPrometheus):
                    unusable = str(exc)
                break
            if tel is not None:
                samples += tel.n_samples
                try:
                    self._feed(tel)
                except TrainguardError as exc:  # defensive: the grid is ours, should not be
                    st.count_error("score")
                    errors.append(f"score: {exc}")
            st.cursor = hi + step
            fetched_to = hi
            if st.first_t is None and tel is not None:
                st.first_t = int(tel.times[0])
            due = self._reconcile(now, hi)
            if due or st.cursor <= newest:
                # Before delivering (a crash re-delivers), and to keep a long catch-up's
                # progress; the last chunk's state is saved once, after the loop, otherwise.
                self._save(errors)
            changes += self._deliver(due, errors)
            if self.progress is not None:
                self.progress(st.cursor - begin_cursor, total)
        changes += self._deliver(self._close_kernel_alerts(), errors)
        events = self._poll_kernel_logs(now, changes, errors)
        if fetched_to is not None or events:
            st.last_success = now if fetched_to is not None else st.last_success
            self._save(errors)
        self._resend(now, errors)
        self._export(now)
        det = self.cfg.detect
        warmup = warmup_blocks(st.first_t, st.cursor, step_s=step, block_s=det.block_s,
                               warmup_s=det.warmup_s)
        return RoundReport(fetched_to, samples, tuple(changes), events, tuple(errors),
                           fetched_from=None if fetched_to is None else begin_cursor,
                           warmup=warmup, prometheus_problem=unusable)

    def _fetch(self, lo: int, hi: int) -> Telemetry | None:
        """Points lo..hi (detector time, inclusive) from Prometheus; None when there are none."""
        tm = self.cfg.replay
        # Until Prometheus has scraped something (a server just started, a new cluster), ask
        # every round; then every `discover_s` for new metrics and types.
        if not self._names or not self._kinds \
                or self.clock() - self._discovered_at >= self.cfg.discover_s:
            self._discover(lo, hi)
        names = list(self.cfg.metrics) if self.cfg.metrics is not None else self._names or []
        if not names:
            return None
        builder = TelemetryBuilder(IdentityConfig().for_node_label(self.cfg.node_label),
                                   step_s=self.step_s)
        grid = None if tm.identity else ReplayGrid.of(tm, lo, hi, self.step_s)
        if grid is None:
            start, end, wall_step = float(lo), float(hi), float(self.step_s)
        else:
            start, end, wall_step = grid.start, grid.end, grid.step
        read_prometheus(self.client, builder, metrics=names, start=start, end=end,
                        step_s=wall_step, align=False, kinds=self._kinds,
                        retime=None if grid is None else grid.to_det)
        builder.require_node_label()  # a --node-label no series carries: say which exist
        if builder.n_samples == 0:
            return None
        try:
            return builder.build(start_s=lo, end_s=hi + self.step_s)
        except TelemetryError as exc:
            raise TelemetryError(
                f"Prometheus returned {builder.n_samples} samples for {iso(lo)} to {iso(hi)}, "
                f"none on the detector's {self.step_s} s grid ({exc})") from exc

    def _discover(self, lo: int, hi: int) -> None:
        tm = self.cfg.replay
        self._kinds = metric_kinds(self.client)
        if self.cfg.metrics is None:
            start = tm.to_prom(lo - self.cfg.history_s)
            names = self.client.series_names(None, start, tm.to_prom(hi))
            self._names = [n for n in names if not n.startswith(self.cfg.exclude_prefixes)]
        self._discovered_at = self.clock()

    def _feed(self, tel: Telemetry) -> None:
        if not self._size_checked:
            self._check_size(tel)
        if self.detector is None:
            self.detector = Detector(self.cfg.detect)
        self.detector.feed(tel)

    def _check_size(self, tel: Telemetry) -> None:
        """Once per process: note a calibration tuned on a cluster of another size."""
        self._size_checked = True
        cal = self.cfg.calibration
        self.size_note = None if cal is None else size_note(cal, cluster_size(tel))
        if self.size_note is not None:
            (self.on_note or log.warning)(self.size_note)

    def _reconcile(self, now: float, scored_to: int) -> list[Change]:
        det = self.detector
        if det is None:
            return []
        tracker = det.tracker
        warm_until = self.state.warm_until
        if warm_until is not None and scored_to + self.step_s < warm_until:
            # Still warming up on history: decide once the warm-up is scored, so what is
            # history (closed by then) and what is live (still open) does not depend on how the
            # history was cut into queries.
            return []
        changes = reconcile(self.state.alerts, tracker.open_episodes(), tracker.closed,
                            now=now, warm_until=self.state.warm_until, scored_to=scored_to)
        changes = [replace(c, alert=self._calibrated(c.alert)) for c in changes]
        for c in changes:
            self._remember(c.alert)
        # Closed episodes the cool-down can no longer re-open have been reported: let go.
        horizon = scored_to - self.cfg.detect.cooldown_s - 2 * self.cfg.detect.block_s
        tracker.forget_closed(horizon)
        keep_from = horizon - self.cfg.history_s
        changed = {c.alert.key for c in changes}  # delivered next, even with no output due
        self.state.alerts = {k: a for k, a in self.state.alerts.items()
                             if a.open or k in changed or self._due(a)
                             or (a.end or 0) >= keep_from}
        return changes

    def _calibrated(self, alert: LiveAlert) -> LiveAlert:
        """The detector alert with its kind's calibrated false-alarm rate, when there is one."""
        cal = self.cfg.calibration
        rate = None if cal is None else cal.rate(alert.kind)
        if cal is None or rate is None or alert.expected_fp_per_day is not None:
            return alert
        return replace(alert, expected_fp_per_day=rate.fp_per_day,
                       expected_fp_per_day_upper95=rate.fp_per_day_upper95,
                       expected_fp_per_nodes=cal.per_nodes)

    def _remember(self, alert: LiveAlert) -> None:
        self.state.alerts[alert.key] = alert

    # -- delivery ---------------------------------------------------------------------------
    def _deliver(self, changes: list[Change], errors: list[str]) -> list[Change]:
        """Deliver every pending alert (these changes and any left over from before)."""
        delivered: list[Change] = []
        for c in changes:
            if c.alert.historical:
                # Found in the warm-up history and over by its end: recorded (the store, the
                # --json stream, /status), never paged or acted on.
                alert = self._store_alert(c.alert, errors) if not c.alert.stored else c.alert
                self._remember(alert)
                delivered.append(Change(c.kind, alert))
                continue
            alert = self._deliver_one(self.state.alerts[c.alert.key], fired=c.kind == "fired",
                                      errors=errors)
            delivered.append(Change(c.kind, alert))
            if c.kind == "fired":
                sev = severity_of(alert.kind)
                self.state.alerts_total[sev] = self.state.alerts_total.get(sev, 0) + 1
        changed = {c.alert.key for c in changes}
        for key, alert in list(self.state.alerts.items()):
            if self._due(alert) and key not in changed:
                self._deliver_one(alert, fired=not alert.decided, errors=errors)
        if delivered:
            self._save(errors)
        for c in delivered:
            log.log(logging.WARNING if c.kind == "fired" and not c.alert.historical
                    else logging.INFO, "watch: %s %s%s alert on %s: %s", c.kind, c.alert.kind,
                    " (history)" if c.alert.historical else "", c.alert.node, c.alert.summary)
            if self.on_change is not None:
                self.on_change(c)
        return delivered

    def _due(self, alert: LiveAlert) -> bool:
        """A delivery of the alert is still due to an output this service has."""
        return alert.pending(store=self.store is not None,
                             alertmanager=self.alertmanager is not None)

    def _deliver_one(self, alert: LiveAlert, *, fired: bool, errors: list[str]) -> LiveAlert:
        """Each output this service has gets the alert; `stored`, `sent` and `acted` say what
        really happened (false for an output that does not exist)."""
        if self.store is not None and not alert.stored:
            alert = self._store_alert(alert, errors)
        if alert.historical:  # recorded, never paged or acted on
            self._remember(alert)
            return alert
        if self.alertmanager is not None and not alert.sent:
            alert = replace(alert, sent=self._post([alert], errors))
        if not alert.decided:
            alert = replace(alert, decided=True, acted=fired and self._act(alert))
        self._remember(alert)
        return alert

    def _store_alert(self, alert: LiveAlert, errors: list[str]) -> LiveAlert:
        if self.store is None:
            return alert
        try:
            sid = alert.store_id
            if sid is None:
                found = self.store.find_alert(node=alert.node, kind=alert.kind,
                                              start=alert.start, source=_store_source(alert))
                sid = found.id if found is not None else None
            if sid is None:
                sid = self.store.add_alert(node=alert.node, start=alert.start, end=alert.end,
                                           peak_score=alert.peak, kind=alert.kind,
                                           signals=alert.signals, source=_store_source(alert))
            else:
                self.store.update_alert(sid, end=alert.end, peak_score=alert.peak,
                                        signals=alert.signals)
        except TrainguardError as exc:
            self.state.count_error("store")
            errors.append(f"store: cannot write the alert: {exc}")
            return alert
        return replace(alert, store_id=sid, stored=True)

    def _am_alert(self, alert: LiveAlert) -> am.NodeAlert:
        tm = self.cfg.replay
        return am.NodeAlert(node=alert.node, severity=severity_of(alert.kind),
                            start=tm.to_prom(alert.start),
                            end=None if alert.end is None else tm.to_prom(alert.end),
                            kind=alert.kind, score=alert.peak, summary=alert.summary,
                            extra_labels={} if alert.source == "detector"
                            else {"evidence": alert.source},
                            annotations=_rate_annotations(alert))

    def _post(self, alerts: list[LiveAlert], errors: list[str]) -> bool:
        """Whether Alertmanager accepted the alerts (False without one)."""
        if self.alertmanager is None:
            return False
        ok = self.alertmanager.post([self._am_alert(a) for a in alerts])
        if not ok:
            self.state.count_error("alertmanager")
            errors.append(f"alertmanager: {len(alerts)} alert(s) not delivered to "
                          f"{self.alertmanager.url}: {self.alertmanager.last_error} "
                          "(retried next round)")
        return ok

    def _act(self, alert: LiveAlert) -> bool:
        """Decide and run the actions for a fired alert; True when a step was done (dry-run,
        skipped, rate-limited or failed steps are not an action that ran)."""
        if self.executor is None:
            return False
        tm = self.cfg.replay
        evidence = tuple(f"{s.get('metric')} {s.get('gpu') or ''} {s.get('deviation')}".strip()
                         for s in alert.signals)
        result = self.executor.handle(ActionAlert(
            node=alert.node, severity="hard" if alert.kind == "hard" else "predictive",
            confidence=confidence(alert.kind, alert.peak, self.cfg.detect.score_on),
            summary=alert.summary, time=tm.to_prom(alert.start), evidence=evidence,
            score=alert.peak, metrics=tuple(str(s.get("metric")) for s in alert.signals)))
        counts = self.state.actions_total
        steps = [(s.action, s.outcome.value) for s in result.steps]
        if not steps and result.outcome is Outcome.RATE_LIMITED:
            steps = [("exclude", Outcome.RATE_LIMITED.value)]
        for action, outcome in steps:
            key = f"{action}/{outcome}"
            counts[key] = counts.get(key, 0) + 1
        self.state.actions = self.executor.state()
        return any(s.outcome is Outcome.DONE for s in result.steps)

    def _resend(self, now: float, errors: list[str]) -> None:
        """Re-post the open alerts before Alertmanager's resolve_timeout forgets them."""
        if self.alertmanager is None or now - self._resent_at < self.cfg.resend_s:
            return
        self._resent_at = now
        live = [a for a in self.state.alerts.values() if a.open and not a.historical]
        if live:
            self._post(live, errors)

    # -- kernel logs ------------------------------------------------------------------------
    def _poll_kernel_logs(self, now: float, changes: list[Change], errors: list[str]) -> int:
        if self.kernel_logs is None:
            return 0
        events = self.kernel_logs.poll()
        self.state.kernel_logs = self.kernel_logs.position()
        if not events:
            return 0
        if self.store is not None:
            try:
                self.store.add_events(events)
            except TrainguardError as exc:
                self.state.count_error("store")
                errors.append(f"store: {exc}")
        fired = [self._kernel_alert(ev, now) for ev in events]
        due = [Change("fired", a) for a in fired if a is not None]
        changes += self._deliver(due, errors)
        return len(events)

    def _kernel_alert(self, ev: FailureEvent, now: float) -> LiveAlert | None:
        """A hard alert for node-level kernel evidence (an XID that needs a reset or a drain);
        evidence within the detector's hard cool-down of an open one joins it."""
        if ev.host is None or ev.severity is not Severity.FATAL or ev.action not in _NODE_ACTIONS:
            return None
        t = ev.time if ev.time_kind is TimeKind.ABSOLUTE and ev.time is not None else now
        det_t = self.cfg.replay.to_det(t)
        for a in self.state.alerts.values():
            if (a.source == KERNEL_SOURCE and a.node == ev.host and a.open
                    and det_t - a.start <= self.cfg.detect.hard_cooldown_s):
                return None
        signal = {"metric": ev.signature, "gpu": ev.gpu_pci, "deviation": ev.xid or 0,
                  "detail": ev.summary[:200]}
        alert = LiveAlert(node=ev.host, kind="hard", start=det_t, end=None, peak=1.0,
                          source=KERNEL_SOURCE, raised_at=now, signals=(signal,),
                          summary=f"kernel log of {ev.host}: {ev.summary}"[:500])
        self._remember(alert)
        return alert

    def _close_kernel_alerts(self) -> list[Change]:
        """Kernel-log alerts end a hard cool-down after their evidence (detector time)."""
        if self.state.cursor is None:
            return []
        scored_to = self.state.cursor - self.step_s
        out = []
        for a in list(self.state.alerts.values()):
            if a.source == KERNEL_SOURCE and a.open \
                    and scored_to - a.start > self.cfg.detect.hard_cooldown_s:
                closed = a.changed(end=a.start + self.cfg.detect.hard_cooldown_s)
                self._remember(closed)
                out.append(Change("resolved", closed))
        return out

    # -- outputs ----------------------------------------------------------------------------
    def _export(self, now: float) -> None:
        if self.exporter is None:
            return
        self.exporter.update(self.snapshot(now))

    def snapshot(self, now: float) -> MetricsSnapshot:
        st = self.state
        scores: dict[str, float] = {}
        det = self.detector
        if det is not None and det.tracker.last_scores is not None:
            for node, s in zip(det.tracker.nodes, det.tracker.last_scores.tolist(), strict=False):
                if math.isfinite(s):
                    scores[node] = float(s)
        open_alerts = tuple(OpenAlert(a.node, severity_of(a.kind), a.kind)
                            for a in st.alerts.values() if a.open and not a.historical)
        actions: dict[tuple[str, str], int] = {}
        for key, value in st.actions_total.items():
            action, _, outcome = key.partition("/")
            actions[(action, outcome)] = value
        lag = None
        if st.cursor is not None and st.last_success is not None:
            lag = max(0.0, now - self.cfg.replay.to_prom(st.cursor - self.step_s))
        return MetricsSnapshot(node_scores=scores, open_alerts=open_alerts,
                               alerts_total=dict(st.alerts_total),
                               errors_total=dict(st.errors_total),
                               actions_total=actions,
                               last_success=st.last_success, lag_s=lag)

    def status(self) -> dict[str, Any]:
        """The `/status` document: where the service stands."""
        with self._lock:
            st = self.state
            tm = self.cfg.replay
            return {"cursor": st.cursor, "first_t": st.first_t, "warm_until": st.warm_until,
                    "step_s": self.step_s, "note": self.note,
                    "scored_to_wall": None if st.cursor is None
                    else tm.to_prom(st.cursor - self.step_s),
                    "last_success": st.last_success, "alerts_total": st.alerts_total,
                    "errors_total": st.errors_total, "actions_total": st.actions_total,
                    "alerts": [a.to_dict() for a in st.alerts.values() if not a.historical],
                    "history": [a.to_dict() for a in st.alerts.values() if a.historical]}

    # -- the loop ---------------------------------------------------------------------------
    def _save(self, errors: list[str]) -> None:
        if self.executor is not None:
            self.state.actions = self.executor.state()
        try:
            save_state(self.cfg.state_dir, self.state, self.detector)
        except OSError as exc:
            self.state.count_error("state")
            errors.append(f"state: cannot save it in {self.cfg.state_dir}: {exc}")

    def run(self, stop: threading.Event,
            on_round: Callable[[RoundReport], None] | None = None) -> None:
        """Rounds every `interval_s` until `stop` is set. A failing round is logged and
        counted; the loop goes on.

        This loop is where a round is logged, in one line (`RoundReport.line`: a warning when
        something went wrong, else at INFO): `round` only reports, so a caller of one round
        (``watch --once``) shows it itself, not twice."""
        while not stop.is_set():
            started = self.clock()
            try:
                report = self.round()
                log.log(logging.WARNING if report.errors else logging.INFO, "watch: %s",
                        report.line())
                if on_round is not None:
                    on_round(report)
            except Exception:  # the service boundary: log, count, keep watching
                log.exception("watch: round failed")
                self.state.count_error("round")
            stop.wait(max(0.0, self.cfg.interval_s - (self.clock() - started)))


def _store_source(alert: LiveAlert) -> str:
    return STORE_SOURCE if alert.source == "detector" else f"{STORE_SOURCE}:{alert.source}"


def _seconds(text: str) -> float | None:
    try:
        return parse_duration(str(text), "scrapeInterval")
    except TrainguardError:
        return None
