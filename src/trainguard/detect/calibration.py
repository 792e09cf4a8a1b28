"""The detector config file `trainguard tune` writes and `detect`, `backtest`, `watch` read.

A TOML file with two tables:

- ``[detect]``: :class:`DetectorConfig` fields (the same table a watch config holds);
- ``[calibration]``: how often each alert kind was a false alarm on held-out history, per day
  per ``per_nodes`` nodes, with its 95% upper bound (a short held-out part bounds the rate
  loosely: 0 false alarms in one day of 16 nodes still allows 11.9/day per 64 nodes), the
  budget, the time ranges and the cluster size (nodes, GPUs per node) it was measured on. Every
  alert then carries its kind's rate and bound (:func:`annotate`); without a calibration
  nothing is claimed.

    >>> f = loads("[detect]\\nscore_on = 12.0\\n", "x.toml")
    >>> f.detect.score_on, f.calibration
    (12.0, None)
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from trainguard.detect.alerts import AlertEpisode, AlertKind
from trainguard.detect.config import DetectorConfig
from trainguard.errors import ConfigError

__all__ = ["MAX_FILE_BYTES", "Calibration", "DetectorFile", "KindRate", "annotate",
           "days_for_bound", "detector_config", "detector_file", "dumps", "kind_rates", "load",
           "loads", "poisson_upper95", "with_memory_limit"]

MAX_FILE_BYTES = 1 << 20
_NOT_IN_FILE = frozenset({"max_memory_bytes"})
"""DetectorConfig fields that belong to the machine running it, not to the calibration."""
_SPAN_KEYS = ("tune_start", "tune_end", "heldout_start", "heldout_end")
_TOTAL_KEYS = ("false_positives", "fp_per_day", "fp_per_day_upper95")
"""The overall held-out figures in ``[calibration]``: derived from the kinds' (see
`Calibration.total`), written for the reader, checked but not needed when read."""


@dataclass(frozen=True, slots=True)
class KindRate:
    """False alarms of one alert kind on the held-out part."""

    kind: str
    false_positives: int
    fp_per_day: float
    """Per day per `Calibration.per_nodes` nodes."""
    fp_per_day_upper95: float
    """One-sided 95% Poisson upper bound of the same (few events: the point estimate is rough)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Where the expected false-alarm rates came from."""

    per_nodes: int
    budget_fp_per_day: float
    n_nodes: int
    tune_span: tuple[float, float]
    heldout_span: tuple[float, float]
    kinds: tuple[KindRate, ...]
    gpus_per_node: int | None = None
    """GPUs per node of the cluster it was tuned on (None: not recorded, or no per-GPU
    series); `n_nodes` is its node count."""

    def rate(self, kind: str) -> KindRate | None:
        return next((k for k in self.kinds if k.kind == kind), None)

    @property
    def heldout_days(self) -> float:
        return (self.heldout_span[1] - self.heldout_span[0]) / 86400.0

    def total(self) -> KindRate:
        """All kinds together (``kind`` "all"): their false alarms, rate and 95% bound."""
        days = self.heldout_days
        scale = self.per_nodes / self.n_nodes / days if days > 0 and self.n_nodes > 0 else 0.0
        k = sum(r.false_positives for r in self.kinds)
        return KindRate("all", k, sum(r.fp_per_day for r in self.kinds),
                        poisson_upper95(k) * scale)


@dataclass(frozen=True, slots=True)
class DetectorFile:
    """A parsed detector config file."""

    detect: DetectorConfig
    calibration: Calibration | None = None


def poisson_upper95(k: int) -> float:
    """One-sided 95% upper bound of a Poisson mean after `k` events (Wilson-Hilferty: 2.97 for
    k = 0 against an exact 3.00, within 1% of the chi-square bound)."""
    n = k + 1.0
    return n * (1.0 - 1.0 / (9.0 * n) + 1.6449 / (3.0 * math.sqrt(n))) ** 3


def days_for_bound(budget_fp_per_day: float, n_nodes: int, per_nodes: int) -> float:
    """Days of history on `n_nodes` nodes after which zero false alarms bound the rate (95%
    upper) within `budget_fp_per_day` per `per_nodes` nodes (inf for a budget of 0).

    >>> round(days_for_bound(0.3, 16, 64), 1)
    39.6
    """
    if budget_fp_per_day <= 0 or n_nodes < 1:
        return math.inf
    return poisson_upper95(0) * per_nodes / n_nodes / budget_fp_per_day


def kind_rates(fp_alerts: Sequence[AlertEpisode], days: float, n_nodes: int, per_nodes: int
               ) -> tuple[KindRate, ...]:
    """Per alert kind: false alarms per day per `per_nodes` nodes (and the 95% upper bound)."""
    scale = per_nodes / n_nodes / days if days > 0 and n_nodes > 0 else 0.0
    out = []
    for kind in AlertKind:
        k = sum(a.kind is kind for a in fp_alerts)
        out.append(KindRate(kind.value, k, k * scale, poisson_upper95(k) * scale))
    return tuple(out)


def annotate(alerts: Sequence[AlertEpisode], cal: Calibration | None) -> list[AlertEpisode]:
    """`alerts` with their kind's calibrated false-alarm rate (unchanged without `cal`)."""
    if cal is None:
        return list(alerts)
    out = []
    for a in alerts:
        r = cal.rate(a.kind.value)
        out.append(a if r is None else replace(
            a, expected_fp_per_day=r.fp_per_day,
            expected_fp_per_day_upper95=r.fp_per_day_upper95,
            expected_fp_per_nodes=cal.per_nodes))
    return out


# --- writing -----------------------------------------------------------------------------------

def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def dumps(f: DetectorFile, header: Sequence[str] = ()) -> str:
    """The TOML text of `f` (`header` lines become leading comments)."""
    lines = [f"# {h}" for h in header]
    lines.append("[detect]")
    for fd in fields(DetectorConfig):
        if fd.name not in _NOT_IN_FILE:
            lines.append(f"{fd.name} = {_value(getattr(f.detect, fd.name))}")
    cal = f.calibration
    if cal is not None:
        lines += ["", "[calibration]", "# false alarms per day per `per_nodes` nodes, measured "
                  "on the held-out part (unix seconds)",
                  f"per_nodes = {cal.per_nodes}",
                  f"budget_fp_per_day = {_value(cal.budget_fp_per_day)}",
                  f"n_nodes = {cal.n_nodes}"]
        if cal.gpus_per_node is not None:
            lines.append(f"gpus_per_node = {cal.gpus_per_node}")
        spans = (*cal.tune_span, *cal.heldout_span)
        lines += [f"{k} = {_value(float(v))}" for k, v in zip(_SPAN_KEYS, spans, strict=True)]
        total = cal.total()
        lines += ["# all kinds together (from the tables below); fp_per_day_upper95: the 95% "
                  "upper bound", f"false_positives = {total.false_positives}",
                  f"fp_per_day = {_value(total.fp_per_day)}",
                  f"fp_per_day_upper95 = {_value(total.fp_per_day_upper95)}"]
        for r in cal.kinds:
            lines += ["", f"[calibration.{r.kind}]",
                      f"false_positives = {r.false_positives}",
                      f"fp_per_day = {_value(r.fp_per_day)}",
                      f"fp_per_day_upper95 = {_value(r.fp_per_day_upper95)}"]
    return "\n".join(lines) + "\n"


# --- reading -----------------------------------------------------------------------------------

def load(path: Path) -> DetectorFile:
    """Read a detector config file; ConfigError (naming the file and key) when it is not one."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a detector config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not a detector config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text") from exc
    return loads(text, str(path))


def loads(text: str, where: str) -> DetectorFile:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{where}: not valid TOML: nested too deeply") from exc
    unknown = sorted(set(doc) - {"detect", "calibration"})
    if unknown:
        raise ConfigError(f"{where}: unknown section(s): {', '.join(unknown)} "
                          "(known: detect, calibration)")
    if "detect" not in doc:
        raise ConfigError(f"{where}: no [detect] table: not a detector config file")
    detect = detector_config(_table(doc, "detect", where), where)
    cal = _calibration(_table(doc, "calibration", where), where) if "calibration" in doc \
        else None
    return DetectorFile(detect, cal)


def _table(doc: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    t = doc.get(key, {})
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: {key} must be a table ([{key}])")
    return dict(t)


def detector_config(values: Mapping[str, Any], where: str) -> DetectorConfig:
    """A DetectorConfig from a ``[detect]`` table, every value type-checked."""
    types = {fd.name: fd.type for fd in fields(DetectorConfig)}
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise ConfigError(f"{where}: [detect] unknown key(s): {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(types))})")
    kw: dict[str, Any] = {}
    for key, v in values.items():
        want_int = types[key] in (int, "int")
        ok = (isinstance(v, int) if want_int else isinstance(v, int | float)) and \
            not isinstance(v, bool)
        if not ok or (isinstance(v, float) and not math.isfinite(v)):
            what = "an integer" if want_int else "a number"
            raise ConfigError(f"{where}: detect.{key} must be {what} (got {v!r})")
        kw[key] = v if want_int else float(v)
    try:
        return DetectorConfig(**kw)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _number(t: Mapping[str, Any], key: str, where: str, *, integer: bool = False) -> float:
    if key not in t:
        raise ConfigError(f"{where}: calibration.{key} is missing")
    v = t[key]
    if isinstance(v, bool) or not isinstance(v, int if integer else int | float) or \
            not math.isfinite(v) or v < 0:
        kind = "a non-negative integer" if integer else "a non-negative number"
        raise ConfigError(f"{where}: calibration.{key} must be {kind} (got {v!r})")
    return float(v)


def _calibration(t: dict[str, Any], where: str) -> Calibration:
    scalars = {"per_nodes", "budget_fp_per_day", "n_nodes", "gpus_per_node", *_SPAN_KEYS,
               *_TOTAL_KEYS}
    kinds = {k.value for k in AlertKind}
    unknown = sorted(set(t) - scalars - kinds)
    if unknown:
        raise ConfigError(f"{where}: [calibration] unknown key(s): {', '.join(unknown)}")
    per_nodes = int(_number(t, "per_nodes", where, integer=True))
    n_nodes = int(_number(t, "n_nodes", where, integer=True))
    if per_nodes < 1 or n_nodes < 1:
        raise ConfigError(f"{where}: calibration.per_nodes and n_nodes must be >= 1")
    gpus = int(_number(t, "gpus_per_node", where, integer=True)) if "gpus_per_node" in t \
        else None
    if gpus is not None and gpus < 1:
        raise ConfigError(f"{where}: calibration.gpus_per_node must be >= 1")
    for key in _TOTAL_KEYS:
        if key in t:
            _number(t, key, where, integer=key == "false_positives")
    sp = [_number(t, k, where) for k in _SPAN_KEYS]
    rates = []
    for kind in [k for k in t if k in kinds]:
        sub = t[kind]
        if not isinstance(sub, dict):
            raise ConfigError(f"{where}: calibration.{kind} must be a table")
        bad = sorted(set(sub) - {"false_positives", "fp_per_day", "fp_per_day_upper95"})
        if bad:
            raise ConfigError(f"{where}: [calibration.{kind}] unknown key(s): {', '.join(bad)}")
        rates.append(KindRate(
            kind, int(_number(sub, "false_positives", f"{where} [{kind}]", integer=True)),
            _number(sub, "fp_per_day", f"{where} [{kind}]"),
            _number(sub, "fp_per_day_upper95", f"{where} [{kind}]")))
    return Calibration(per_nodes, _number(t, "budget_fp_per_day", where), n_nodes,
                       (sp[0], sp[1]), (sp[2], sp[3]), tuple(rates), gpus)


def with_memory_limit(f: DetectorFile, max_memory_bytes: int) -> DetectorFile:
    """`f` with the command line's memory limit (the file does not carry one)."""
    return replace(f, detect=replace(f.detect, max_memory_bytes=max_memory_bytes))


def detector_file(path: Path | None, max_memory_bytes: int) -> DetectorFile:
    """The config a command runs with: `path`'s (ConfigError when unusable) or the defaults,
    with the command line's memory limit."""
    if path is None:
        return DetectorFile(DetectorConfig(max_memory_bytes=max_memory_bytes))
    return with_memory_limit(load(path), max_memory_bytes)
