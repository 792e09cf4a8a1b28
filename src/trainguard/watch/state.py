"""What `trainguard watch` keeps across restarts, and how it is written.

Two files in the state directory, each replaced atomically (write, fsync, rename):

- ``state.full.json``: everything, consistent with itself: the detector (its learned baselines
  and open episodes), the cursor (the next time to fetch), the alerts raised, the counters, the
  kernel-log positions and the action limiter. It is JSON, never pickle: the detector is written
  by :mod:`trainguard.watch.statecodec`, whose reader builds only plain data, numeric numpy
  arrays and a closed list of trainguard classes, and runs no code a file names. The format and
  trainguard versions are checked before any of the detector is built.
- ``state.json``: the same without the detector, for people and for the fallback: when
  ``state.full.json`` cannot be used (another trainguard version, a damaged file) the service
  warms up again from Prometheus' history and uses the alerts listed here to raise none twice.

A ``state.pkl`` left by an older trainguard is never read (it could run code when unpickled);
the next save removes it.

A restart therefore resumes at the cursor: what happened while the service was down is fetched
from Prometheus and scored, and every alert it would have raised is raised late, not lost.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainguard import __version__
from trainguard.detect.detector import Detector
from trainguard.fileread import UnreadableFile, read_bounded
from trainguard.valueorigin import InvalidValue
from trainguard.watch.statecodec import StateCodecError, decode, encode

__all__ = ["FULL_NAME", "JSON_NAME", "STATE_VERSION", "LiveAlert", "LoadedState", "WatchState",
           "load_state", "save_state"]

log = logging.getLogger(__name__)

STATE_VERSION = 6
"""2: the scorer's state is held by its signal units (`detect/signals/`); 4: the detector's
cumulative verdicts are held by `CumulativeVerdicts` (`detect/verdicts.py`); 5: the precursor
confirmation keeps each GPU's recent memory wear and the row remaps that wait
(`detect/confirm.py`); 6: the recurring-count rule is its own unit, with a burst window
(`detect/recurring.py`)."""
FULL_NAME = "state.full.json"
JSON_NAME = "state.json"
LEGACY_PICKLE_NAME = "state.pkl"
"""Written by trainguard before the JSON format; never read, removed on the next save."""
FORMAT = "trainguard-watch-state"
MAX_STATE_BYTES = 1 << 30
"""A state file larger than this is not read (the detector of a 10,000-GPU cluster is ~100 MB)."""


@dataclass(frozen=True, slots=True)
class LiveAlert:
    """One alert as the service raised it. Times are detector time (unix seconds; the replay
    clock's simulated time when one is set); `raised_at` is wall time."""

    node: str
    kind: str
    """``predictive`` or ``hard``."""
    start: float
    end: float | None
    """None while open."""
    peak: float
    source: str
    """``detector`` or ``kernel-log``."""
    raised_at: float
    signals: tuple[Mapping[str, Any], ...] = ()
    summary: str = ""
    store_id: int | None = None
    stored: bool = False
    """A store holds the alert as it stands now (end and peak included); false without a
    store (``--db none``) and until a failed write succeeds."""
    sent: bool = False
    """An Alertmanager accepted the alert as it stands now; false without ``--alertmanager``,
    for history, and until a failed post succeeds."""
    acted: bool = False
    """An action ran for the alert: at least one step (exclude, drain, notify) was done. False
    with actions off, in dry-run, and when the policy skipped or rate-limited it."""
    decided: bool = False
    """Actions were decided for the alert (once, when it fired), whatever the outcome."""
    historical: bool = False
    """Opened and closed inside the first warm-up: stored and reported, never paged or acted on."""
    expected_fp_per_day: float | None = None
    """The alert kind's calibrated false alarms per day per `expected_fp_per_nodes` nodes
    (`trainguard tune`); None without a calibration."""
    expected_fp_per_nodes: int | None = None
    expected_fp_per_day_upper95: float | None = None
    """The 95% upper bound of `expected_fp_per_day`."""

    @property
    def key(self) -> str:
        return alert_key(self.node, self.kind, self.start, self.source)

    @property
    def open(self) -> bool:
        return self.end is None

    def pending(self, *, store: bool, alertmanager: bool) -> bool:
        """Something is still due for the alert, given which outputs exist: a store write, an
        Alertmanager post, the action decision (history: only the store write)."""
        unstored = store and not self.stored
        if self.historical:
            return unstored
        return unstored or (alertmanager and not self.sent) or not self.decided

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind, "start": self.start, "end": self.end,
                "peak": round(self.peak, 4), "source": self.source, "raised_at": self.raised_at,
                "signals": [dict(s) for s in self.signals], "summary": self.summary,
                "store_id": self.store_id, "stored": self.stored, "sent": self.sent,
                "acted": self.acted, "decided": self.decided, "historical": self.historical,
                "expected_fp_per_day": self.expected_fp_per_day,
                "expected_fp_per_nodes": self.expected_fp_per_nodes,
                "expected_fp_per_day_upper95": self.expected_fp_per_day_upper95}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LiveAlert:
        end = d.get("end")
        sid = d.get("store_id")
        historical = bool(d.get("historical"))
        # An older trainguard wrote "acted" for "decided", and marked history as sent and acted.
        decided = bool(d.get("decided", d.get("acted")))
        return cls(node=str(d["node"]), kind=str(d["kind"]), start=float(d["start"]),
                   end=None if end is None else float(end), peak=float(d.get("peak", 0.0)),
                   source=str(d.get("source", "detector")),
                   raised_at=float(d.get("raised_at", 0.0)),
                   signals=tuple(dict(s) for s in d.get("signals", ()) if isinstance(s, dict)),
                   summary=str(d.get("summary", "")),
                   store_id=None if sid is None else int(sid), stored=bool(d.get("stored")),
                   sent=bool(d.get("sent")) and not historical,
                   acted=bool(d.get("acted")) and not historical and "decided" in d,
                   decided=decided, historical=historical,
                   expected_fp_per_day=_opt_float(d.get("expected_fp_per_day")),
                   expected_fp_per_nodes=_opt_int(d.get("expected_fp_per_nodes")),
                   expected_fp_per_day_upper95=_opt_float(
                       d.get("expected_fp_per_day_upper95")))

    def changed(self, **kw: Any) -> LiveAlert:
        """A new version whose deliveries are due again (`acted` stays: actions run once)."""
        return replace(self, **kw, stored=False, sent=False)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def alert_key(node: str, kind: str, start: float, source: str) -> str:
    return f"{source}|{node}|{kind}|{start:.3f}"


@dataclass
class WatchState:
    """The service's mutable state (see the module docstring)."""

    cursor: int | None = None
    """Next detector time to fetch; None before the first fetch."""
    first_t: int | None = None
    """Detector time of the first sample fetched (the start of the first warm-up)."""
    warm_until: int | None = None
    """Alerts closed before this detector time are history of the first warm-up."""
    step_s: int | None = None
    alerts: dict[str, LiveAlert] = field(default_factory=dict)
    alerts_total: dict[str, int] = field(default_factory=dict)
    errors_total: dict[str, int] = field(default_factory=dict)
    actions_total: dict[str, int] = field(default_factory=dict)
    """Keyed ``action/outcome``."""
    kernel_logs: dict[str, Any] = field(default_factory=dict)
    actions: dict[str, Any] = field(default_factory=dict)
    last_success: float | None = None

    def count_error(self, stage: str) -> None:
        self.errors_total[stage] = self.errors_total.get(stage, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "trainguard": __version__, "cursor": self.cursor,
                "first_t": self.first_t, "warm_until": self.warm_until, "step_s": self.step_s,
                "alerts": [a.to_dict() for a in self.alerts.values()],
                "alerts_total": self.alerts_total, "errors_total": self.errors_total,
                "actions_total": self.actions_total, "kernel_logs": self.kernel_logs,
                "actions": self.actions, "last_success": self.last_success}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WatchState:
        def opt_int(key: str) -> int | None:
            v = d.get(key)
            return None if v is None else int(v)

        alerts = [LiveAlert.from_dict(a) for a in d.get("alerts", []) if isinstance(a, dict)]
        ls = d.get("last_success")
        return cls(cursor=opt_int("cursor"), first_t=opt_int("first_t"),
                   warm_until=opt_int("warm_until"), step_s=opt_int("step_s"),
                   alerts={a.key: a for a in alerts},
                   alerts_total=_counts(d.get("alerts_total")),
                   errors_total=_counts(d.get("errors_total")),
                   actions_total=_counts(d.get("actions_total")),
                   kernel_logs=dict(d.get("kernel_logs") or {}),
                   actions=dict(d.get("actions") or {}),
                   last_success=None if ls is None else float(ls))


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int | float)}


@dataclass(frozen=True, slots=True)
class LoadedState:
    """What :func:`load_state` found: `detector` is None when only the JSON was usable (warm up
    again from history), `state` is None on a first start."""

    state: WatchState | None
    detector: Detector | None
    note: str


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def prepare_dir(directory: Path) -> None:
    """Create the state directory (mode 0700) or check it is a writable directory."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise InvalidValue("watch.state_dir", f"{directory}: cannot create it "
                           f"({exc.strerror or exc})") from exc
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise InvalidValue("watch.state_dir", f"{directory} is not a writable directory")


def save_state(directory: Path, state: WatchState, detector: Detector | None) -> None:
    """Write both files (the full one first: the JSON never runs ahead of it)."""
    doc = state.to_dict()
    tree = None
    if detector is not None:
        try:
            tree = encode(detector)
        except StateCodecError as exc:  # a detector attribute of a new type: a bug, not a stop
            log.error("watch: cannot write the detector state (%s); a restart will warm up "
                      "again", exc)
    full = {"format": FORMAT, "version": STATE_VERSION, "trainguard": __version__,
            "state": doc, "detector": tree}
    _atomic_write(directory / FULL_NAME, json.dumps(full, separators=(",", ":")).encode())
    _atomic_write(directory / JSON_NAME, json.dumps(doc, indent=1).encode())
    legacy = directory / LEGACY_PICKLE_NAME
    if legacy.exists():
        legacy.unlink()
        log.info("watch: removed %s (an older trainguard's state, never read)", legacy)


def load_state(directory: Path) -> LoadedState:
    """Read the state back; never raises for a bad file (it says why in `note`)."""
    full, js = directory / FULL_NAME, directory / JSON_NAME
    problem = ""
    if full.exists():
        try:
            return _load_full(full)
        except Exception as exc:  # a damaged or foreign file: fall back, say why
            problem = f"{full.name} unusable ({type(exc).__name__}: {exc})"
            log.warning("watch: %s; warming up again from history", problem)
    elif (directory / LEGACY_PICKLE_NAME).exists():
        problem = f"{LEGACY_PICKLE_NAME} is from an older trainguard and is not read"
        log.warning("watch: %s; warming up again from history", problem)
    if js.exists():
        try:
            doc = json.loads(_read_regular(js))
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            return LoadedState(WatchState.from_dict(doc), None,
                               (problem + "; " if problem else "")
                               + "warming up again from history (alerts already raised are "
                               "not raised again)")
        except Exception as exc:  # same: a first start is better than no start
            log.warning("watch: %s unusable (%s); starting afresh", js.name, exc)
            return LoadedState(None, None, f"{js.name} unusable: starting afresh")
    return LoadedState(None, None, "first start: warming up from history")


def _load_full(path: Path) -> LoadedState:
    """The full state file; raises (anything) when it cannot be used. The header is checked
    before any of the detector is built."""
    obj = json.loads(_read_regular(path))
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError("not a trainguard watch state")
    if obj.get("version") != STATE_VERSION:
        raise ValueError("written by another state version")
    if obj.get("trainguard") != __version__:
        raise ValueError(f"written by trainguard {str(obj.get('trainguard'))[:40]}")
    if not isinstance(obj.get("state"), dict):
        raise ValueError("no state in it")
    raw = obj.get("detector")
    det = None if raw is None else decode(raw)
    if det is not None and not isinstance(det, Detector):
        raise ValueError("no detector in it")
    return LoadedState(WatchState.from_dict(obj["state"]), det,
                       "resumed from the saved detector state" if det is not None
                       else "no detector saved: warming up again from history")


def _read_regular(path: Path) -> bytes:
    """A state file's bytes: a regular file (a FIFO would block) of at most MAX_STATE_BYTES."""
    try:
        return read_bounded(path, MAX_STATE_BYTES)
    except UnreadableFile as exc:
        raise ValueError(exc.reason) from None
