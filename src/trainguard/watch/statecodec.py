"""The detector as JSON: a closed set of classes, numpy arrays as raw bytes, no pickle.

The watch service keeps its detector across restarts. Pickle would rebuild whatever a file asks
for (``builtins.exec`` included), so the detector is written as a tagged JSON tree instead and
read back by a decoder that can only build:

1. JSON scalars, lists, tuples, dicts (any hashable keys), sets and frozensets;
2. numpy arrays and scalars of a numeric or boolean dtype, from base64 raw bytes + dtype + shape
   (never an object dtype: ``allow_pickle`` has no equivalent here);
3. members of the two enums and instances of the classes in :data:`CLASSES`, each from exactly
   the fields that class has now (a missing or extra field is an error, not a guess).

It calls no function named by the file. Objects reached twice (the layout the detector and its
scorer share, the node list the episode tracker shares with the layout) are written once and
referred to by number, so the decoded graph has the same sharing as the one written.

    >>> blob = encode(detector)                          # doctest: +SKIP
    >>> same = decode(json.loads(json.dumps(blob)))      # doctest: +SKIP
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from enum import Enum
from typing import Any

import numpy as np

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
from trainguard.detect.baseline import Baseline
from trainguard.detect.config import DetectorConfig
from trainguard.detect.confirm import PrecursorConfirm
from trainguard.detect.detector import Detector, _MetricFlags
from trainguard.detect.episodes import EpisodeTracker, _Open
from trainguard.detect.explained import ExplainedActivity
from trainguard.detect.layout import DenseChunk, IndexArrays, Layout
from trainguard.detect.precursor_state import HostState, JitterState, RecurState
from trainguard.detect.precursors import PrecursorRules
from trainguard.detect.recurring import RecurringCounts
from trainguard.detect.scoring import BlockScorer
from trainguard.detect.signals import (
    BaselineConfig,
    BaselineDeviation,
    CounterConfig,
    CounterDeviation,
    Fusion,
    FusionConfig,
    HardConfig,
    HardEvidence,
    PeerConfig,
    PeerDeviation,
    PrecursorConfig,
    Regime,
    RegimeConfig,
)
from trainguard.detect.sparse import SparseCounters
from trainguard.detect.trend import TrendRule, _Series
from trainguard.detect.verdicts import CumulativeVerdicts
from trainguard.errors import TrainguardError
from trainguard.telemetry.frame import Entity, MetricKind

__all__ = ["CLASSES", "ENUMS", "StateCodecError", "decode", "encode"]


class StateCodecError(TrainguardError):
    """A value the state format cannot write, or a state document it refuses to read."""


CLASSES: dict[str, type] = {
    "Detector": Detector, "BlockScorer": BlockScorer, "Layout": Layout,
    "EpisodeTracker": EpisodeTracker, "Open": _Open, "Baseline": Baseline,
    "SparseCounters": SparseCounters, "DetectorConfig": DetectorConfig,
    "AlertEpisode": AlertEpisode, "Signal": Signal, "Entity": Entity,
    "IndexArrays": IndexArrays, "MetricFlags": _MetricFlags, "DenseChunk": DenseChunk,
    "PrecursorRules": PrecursorRules, "PrecursorRecur": RecurState,
    "PrecursorRecurring": RecurringCounts,
    "PrecursorJitter": JitterState,
    "PrecursorHost": HostState, "PrecursorConfirm": PrecursorConfirm,
    "Regime": Regime, "RegimeConfig": RegimeConfig, "PeerDeviation": PeerDeviation,
    "PeerConfig": PeerConfig, "BaselineDeviation": BaselineDeviation,
    "BaselineConfig": BaselineConfig, "CounterDeviation": CounterDeviation,
    "CounterConfig": CounterConfig, "Fusion": Fusion, "FusionConfig": FusionConfig,
    "PrecursorConfig": PrecursorConfig, "HardEvidence": HardEvidence, "HardConfig": HardConfig,
    "TrendRule": TrendRule, "TrendSeries": _Series, "ExplainedActivity": ExplainedActivity,
    "CumulativeVerdicts": CumulativeVerdicts,
}
"""Every class a state file may contain, by the name the file uses for it."""
ENUMS: dict[str, type[Enum]] = {"AlertKind": AlertKind, "MetricKind": MetricKind}

_PROTOTYPES: dict[type, Callable[[], object]] = {
    Detector: Detector,
    BlockScorer: lambda: BlockScorer(DetectorConfig(), Layout()),
}
"""Plain (non-dataclass) classes: built by their own constructor, then given the saved fields;
the fields a fresh instance has are the fields a file must have."""
_CACHES: dict[type, dict[str, Callable[[], object]]] = {
    Layout: {"_index": dict}, BlockScorer: {"_roles": lambda: None}}
"""Fields that only cache what the others determine: not written, rebuilt empty (the layout's
per-metric row index is most of a large detector's objects and is rebuilt on the next chunk)."""
_CLASS_NAMES = {cls: name for name, cls in CLASSES.items()}
_ENUM_NAMES = {cls: name for name, cls in ENUMS.items()}
_DTYPE_KINDS = "biuf"
"""Boolean, signed and unsigned integers, floats: what the detector's arrays hold."""


# -- writing ---------------------------------------------------------------------------------

def encode(value: object) -> Any:
    """`value` as a JSON-ready tree; :class:`StateCodecError` for anything outside the format."""
    return _Encoder().encode(value)


class _Encoder:
    def __init__(self) -> None:
        # id -> (number, object): holding the object keeps its id from being reused meanwhile.
        self.memo: dict[int, tuple[int, object]] = {}
        self.busy: set[int] = set()

    def encode(self, v: object) -> Any:
        # Exact types: a StrEnum is a str and numpy's float64 a float, both must keep their type.
        if v is None or type(v) in (bool, int, float, str):
            return v
        if isinstance(v, Enum):
            name = _ENUM_NAMES.get(type(v))
            if name is None:
                raise StateCodecError(f"cannot write enum {type(v).__qualname__}")
            return {"$e": name, "v": v.value}
        if isinstance(v, np.generic):
            return {"$s": _dtype_str(v.dtype), "v": v.item()}
        if isinstance(v, tuple):
            return {"$t": [self.encode(x) for x in v]}
        if isinstance(v, frozenset):
            return {"$fs": [self.encode(x) for x in v]}
        seen = self.memo.get(id(v))
        if seen is not None:
            if id(v) in self.busy:
                raise StateCodecError(f"cannot write a cycle through {type(v).__qualname__}")
            return {"$r": seen[0]}
        n = len(self.memo)
        self.memo[id(v)] = (n, v)
        self.busy.add(id(v))
        try:
            return {"$id": n, **self._container(v)}
        finally:
            self.busy.discard(id(v))

    def _container(self, v: object) -> dict[str, Any]:
        if isinstance(v, np.ndarray):
            arr = np.ascontiguousarray(v)
            return {"$a": _dtype_str(arr.dtype), "shape": list(arr.shape),
                    "b": base64.b64encode(arr.tobytes()).decode("ascii")}
        if type(v) is list:
            return {"$l": [self.encode(x) for x in v]}
        if type(v) is dict:
            return {"$d": [[self.encode(k), self.encode(x)] for k, x in v.items()]}
        if type(v) is set:
            return {"$set": [self.encode(x) for x in v]}
        name = _CLASS_NAMES.get(type(v))
        if name is None:
            raise StateCodecError(f"cannot write a {type(v).__module__}.{type(v).__qualname__}")
        return {"$o": name, "f": {k: self.encode(x) for k, x in _fields_of(v).items()}}


def _fields_of(obj: object) -> dict[str, object]:
    cls = type(obj)
    caches = _CACHES.get(cls, {})
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
        extra = set(getattr(obj, "__dict__", {})) - set(names)
        if extra:  # an attribute outside the fields would be lost: refuse, loudly
            raise StateCodecError(f"{cls.__qualname__} has attributes outside its fields: "
                                  f"{', '.join(sorted(extra))}")
        return {n: getattr(obj, n) for n in names if n not in caches}
    return {n: v for n, v in vars(obj).items() if n not in caches}


def _dtype_str(dtype: np.dtype[Any]) -> str:
    if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.shape != ():
        raise StateCodecError(f"cannot write an array of dtype {dtype}")
    return dtype.str


# -- reading ---------------------------------------------------------------------------------

def decode(tree: Any) -> Any:
    """The value `tree` (from :func:`encode`, through JSON) describes; StateCodecError (or
    TypeError/ValueError from a constructor's own validation) when it is not well-formed."""
    return _Decoder().decode(tree)


class _Decoder:
    def __init__(self) -> None:
        self.objects: dict[int, object] = {}

    def decode(self, t: Any) -> Any:
        if t is None or isinstance(t, bool | int | float | str):
            return t
        if not isinstance(t, dict):
            raise StateCodecError(f"unexpected {type(t).__name__} in the state")
        if "$r" in t:
            ref = t["$r"]
            if not isinstance(ref, int) or ref not in self.objects:
                raise StateCodecError(f"reference to an unknown object: {ref!r}")
            return self.objects[ref]
        if "$id" in t:
            n = t["$id"]
            if not isinstance(n, int) or isinstance(n, bool) or n in self.objects:
                raise StateCodecError(f"bad object number: {n!r}")
            self.objects[n] = value = self._container(t)
            return value
        if "$e" in t:
            enum = ENUMS.get(t["$e"]) if isinstance(t["$e"], str) else None
            if enum is None:
                raise StateCodecError(f"unknown enum {str(t['$e'])[:80]!r}")
            return enum(t.get("v"))
        if "$s" in t:
            return _dtype(t["$s"]).type(_scalar(t.get("v")))
        if "$t" in t:
            return tuple(self._items(t["$t"]))
        if "$fs" in t:
            return frozenset(self._items(t["$fs"]))
        raise StateCodecError(f"unknown state node with keys {sorted(t)[:5]}")

    def _items(self, raw: Any) -> list[Any]:
        if not isinstance(raw, list):
            raise StateCodecError(f"expected a list, got {type(raw).__name__}")
        return [self.decode(x) for x in raw]

    def _container(self, t: dict[str, Any]) -> object:
        if "$a" in t:
            return _array(t)
        if "$l" in t:
            return self._items(t["$l"])
        if "$set" in t:
            return set(self._items(t["$set"]))
        if "$d" in t:
            pairs = self._items_pairs(t["$d"])
            return {self.decode(k): self.decode(v) for k, v in pairs}
        if "$o" in t:
            return self._object(t)
        raise StateCodecError(f"unknown state object with keys {sorted(t)[:5]}")

    @staticmethod
    def _items_pairs(raw: Any) -> list[tuple[Any, Any]]:
        if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2
                                                for p in raw):
            raise StateCodecError("a dict must be a list of [key, value] pairs")
        return [(p[0], p[1]) for p in raw]

    def _object(self, t: dict[str, Any]) -> object:
        name, raw = t["$o"], t.get("f")
        cls = CLASSES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise StateCodecError(f"refusing to build {str(name)[:80]!r}: not a state class")
        if not isinstance(raw, dict):
            raise StateCodecError(f"{name}: fields must be an object")
        values = {str(k): self.decode(v) for k, v in raw.items()}
        for k, empty in _CACHES.get(cls, {}).items():
            if k in values:
                raise StateCodecError(f"{name}: unexpected field {k}")
            values[k] = empty()
        if dataclasses.is_dataclass(cls):
            return _dataclass(cls, name, values)
        obj = _PROTOTYPES[cls]()
        _same_fields(name, set(vars(obj)), set(values))
        for k, v in values.items():
            setattr(obj, k, v)
        return obj


def _dataclass(cls: type, name: str, values: dict[str, Any]) -> object:
    fields = dataclasses.fields(cls)
    _same_fields(name, {f.name for f in fields}, set(values))
    obj = cls(**{f.name: values[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            object.__setattr__(obj, f.name, values[f.name])  # frozen ones too
    return obj


def _same_fields(name: str, expected: set[str], got: set[str]) -> None:
    if expected != got:
        missing, extra = sorted(expected - got), sorted(got - expected)
        raise StateCodecError(f"{name}: fields differ from this trainguard's (missing "
                              f"{missing[:5]}, unknown {[e[:40] for e in extra[:5]]})")


def _dtype(raw: Any) -> np.dtype[Any]:
    if not isinstance(raw, str) or len(raw) > 8:
        raise StateCodecError(f"bad dtype {str(raw)[:20]!r}")
    try:
        dtype = np.dtype(raw)
    except TypeError as exc:
        raise StateCodecError(f"bad dtype {raw!r}") from exc
    if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.shape != ():
        raise StateCodecError(f"refusing dtype {raw!r}: numbers and booleans only")
    return dtype


def _scalar(v: Any) -> bool | int | float:
    if not isinstance(v, bool | int | float):
        raise StateCodecError(f"bad numpy scalar value {str(v)[:40]!r}")
    return v


def _array(t: dict[str, Any]) -> np.ndarray[Any, Any]:
    dtype = _dtype(t["$a"])
    shape, b64 = t.get("shape"), t.get("b")
    if (not isinstance(shape, list) or len(shape) > 8
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                       for s in shape)):
        raise StateCodecError(f"bad array shape {str(shape)[:60]}")
    if not isinstance(b64, str):
        raise StateCodecError("array without data")
    try:
        raw = base64.b64decode(b64, validate=True)
    except ValueError as exc:
        raise StateCodecError("array data is not base64") from exc
    if len(raw) != int(np.prod(shape, dtype=object)) * dtype.itemsize:
        raise StateCodecError(f"array data has {len(raw)} bytes, not the size of "
                              f"{dtype} x {shape}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
