"""The watch state on disk: a real detector round-trips exactly, and no state file can run code.

Each gadget below is first shown to be live (plain ``pickle.loads`` creates its marker file), then
planted where the watch looks for its state: loading must not create the marker and must fall
back to warming up from ``state.json``.
"""

from __future__ import annotations

import base64
import copyreg
import json
import os
import pickle
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainguard import __version__
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import Detector
from trainguard.simulate import SimConfig, generate
from trainguard.telemetry.frame import Telemetry
from trainguard.watch.state import (
    FORMAT,
    FULL_NAME,
    JSON_NAME,
    LEGACY_PICKLE_NAME,
    STATE_VERSION,
    WatchState,
    load_state,
    save_state,
)
from trainguard.watch.statecodec import CLASSES, StateCodecError, decode, encode

SIM = SimConfig(nodes=6, gpus_per_node=2, days=0.3, seed=2, failures_per_day=6)
DET = DetectorConfig(warmup_s=1800)


@pytest.fixture(scope="module")
def chunks() -> list[Telemetry]:
    return [c.to_telemetry(with_jobs=True) for c in generate(SIM)]


def _fed(chunks: list[Telemetry], n: int) -> Detector:
    det = Detector(DET)
    for c in chunks[:n]:
        det.feed(c)
    return det


def _walk(tree: Any) -> Iterator[dict[str, Any]]:
    if isinstance(tree, dict):
        yield tree
        for v in tree.values():
            yield from _walk(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _walk(v)


# -- a real state round-trips ------------------------------------------------------------------

def test_a_saved_detector_resumes_with_the_same_alerts(chunks: list[Telemetry], tmp_path: Path
                                                       ) -> None:
    det = _fed(chunks, 2)
    save_state(tmp_path, WatchState(cursor=123, step_s=30), det)
    loaded = load_state(tmp_path)
    assert loaded.detector is not None and loaded.state is not None
    assert loaded.state.cursor == 123 and "resumed" in loaded.note
    resumed = loaded.detector
    # the reloaded graph keeps the sharing the detector relies on
    assert resumed.scorer.layout is resumed.layout
    assert resumed.tracker.nodes is resumed.layout.nodes
    assert resumed.tracker.cfg is resumed.cfg
    # ... and writes back to exactly the same document
    assert json.dumps(encode(resumed)) == json.dumps(encode(det))
    for c in chunks[2:]:
        det.feed(c)
        resumed.feed(c)
    expected = [e.to_dict() for e in det.finish()]
    assert expected and [e.to_dict() for e in resumed.finish()] == expected


def test_a_real_state_names_only_listed_classes_and_numeric_arrays(chunks: list[Telemetry]
                                                                   ) -> None:
    tree = encode(_fed(chunks, 2))
    classes = {n["$o"] for n in _walk(tree) if "$o" in n}
    dtypes = {n["$a"] for n in _walk(tree) if "$a" in n}
    assert {"Detector", "BlockScorer", "Layout", "EpisodeTracker", "Baseline",
            "DetectorConfig"} <= classes <= set(CLASSES)
    assert dtypes <= {"|b1", "<i8", "<f8"}


def test_an_object_outside_the_format_is_refused_when_writing() -> None:
    with pytest.raises(StateCodecError, match="cannot write a pathlib"):
        encode({"x": Path("/")})
    with pytest.raises(StateCodecError, match="cannot write an array of dtype object"):
        encode(np.array([print], dtype=object))


# -- no state file runs code -------------------------------------------------------------------

def _su(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def _reduce(func: object, *args: object) -> bytes:
    class Gadget:
        def __reduce__(self) -> tuple[object, tuple[object, ...]]:
            return func, args
    return pickle.dumps({"version": STATE_VERSION, "trainguard": __version__,
                         "detector": Gadget()}, protocol=4)


def _gadgets(marker: Path) -> dict[str, bytes]:
    touch = f"touch {shlex.quote(str(marker))}"
    create = f"open({str(marker)!r}, 'w').close()"
    return {
        "builtins.exec": _reduce(exec, create),
        "builtins.eval": _reduce(eval, create),
        # getattr(__import__('os'), 'system')(touch), spelt out in protocol 0
        "builtins.getattr+__import__": (
            b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(S'os'\ntRS'system'\ntR(S"
            + repr(touch).encode() + b"\ntR."),
        "os.system": b"cos\nsystem\n(S" + repr(touch).encode() + b"\ntR.",
        "posix.system": b"cposix\nsystem\n(S" + repr(touch).encode() + b"\ntR.",
        "subprocess.Popen": _reduce(subprocess.Popen, ["touch", str(marker)]),
        "copyreg._reconstructor": _reduce(copyreg._reconstructor,  # type: ignore[attr-defined]
                                          subprocess.Popen, subprocess.Popen,
                                          ["touch", str(marker)]),
        # protocol 4: a dotted name through a module the old unpickler trusted
        "STACK_GLOBAL trainguard.watch.state.os.system": (
            b"\x80\x04" + _su("trainguard.watch.state") + _su("os.system") + b"\x93"
            + _su(touch) + b"\x85R."),
    }


GADGETS = sorted(_gadgets(Path("/nonexistent")))


def _live(payload: bytes, marker: Path) -> None:
    """The gadget does run under a plain unpickler (so the test below can fail)."""
    obj = pickle.loads(payload)  # on purpose: proves the gadget is real
    child = obj.get("detector") if isinstance(obj, dict) else None
    if isinstance(child, subprocess.Popen):
        child.wait(timeout=30)
    assert marker.exists(), "gadget did not run under plain pickle"
    marker.unlink()


def _state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    (d / JSON_NAME).write_text(json.dumps(WatchState(cursor=900, step_s=30).to_dict()))
    return d


@pytest.mark.parametrize("gadget", GADGETS)
@pytest.mark.parametrize("where", [LEGACY_PICKLE_NAME, FULL_NAME])
def test_a_pickle_gadget_in_the_state_dir_runs_nothing(tmp_path: Path, gadget: str,
                                                        where: str) -> None:
    marker = tmp_path / "marker"
    payload = _gadgets(marker)[gadget]
    _live(payload, marker)
    d = _state_dir(tmp_path)
    (d / where).write_bytes(payload)
    loaded = load_state(d)
    assert not marker.exists()
    assert loaded.detector is None and loaded.state is not None
    assert loaded.state.cursor == 900 and "warming up again" in loaded.note


def _full(detector: Any, **header: Any) -> bytes:
    doc = {"format": FORMAT, "version": STATE_VERSION, "trainguard": __version__,
           "state": WatchState(cursor=900).to_dict(), "detector": detector}
    doc.update(header)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("tree", "reason"), [
    ({"$id": 0, "$o": "builtins.exec", "f": {}}, "refusing to build 'builtins.exec'"),
    ({"$id": 0, "$o": "exec", "f": {}}, "refusing to build 'exec'"),
    ({"$id": 0, "$o": "os.system", "f": {}}, "refusing to build 'os.system'"),
    ({"$id": 0, "$o": "posix.system", "f": {}}, "refusing to build"),
    ({"$id": 0, "$o": "subprocess.Popen", "f": {}}, "refusing to build"),
    ({"$id": 0, "$o": "copyreg._reconstructor", "f": {}}, "refusing to build"),
    ({"$id": 0, "$o": "trainguard.watch.state.os.system", "f": {}}, "refusing to build"),
    ({"$id": 0, "$o": "Detector.__init__", "f": {}}, "refusing to build"),
    ({"$id": 0, "$o": "Detector", "f": {"__class__": "x"}}, "fields differ"),
    ({"$id": 0, "$o": "Signal", "f": {"metric": "m", "gpu": None, "deviation": 1.0,
                                      "detail": "", "__reduce__": 1}}, "fields differ"),
    ({"$e": "builtins.exec", "v": "x"}, "unknown enum"),
    ({"$id": 0, "$a": "|O", "shape": [1], "b": "AAAAAAAAAAA="}, "refusing dtype"),
    ({"$id": 0, "$a": "<f8", "shape": [1 << 40], "b": ""}, "array data has 0 bytes"),
    ({"$s": "|O", "v": 1}, "refusing dtype"),
    ({"$r": 7}, "reference to an unknown object"),
    ({"$pickle": base64.b64encode(b"cos\nsystem\n.").decode()}, "unknown state node"),
])
def test_a_crafted_json_state_is_refused_and_falls_back(tmp_path: Path, tree: Any,
                                                        reason: str) -> None:
    with pytest.raises(StateCodecError, match=reason):
        decode(tree)
    d = _state_dir(tmp_path)
    (d / FULL_NAME).write_bytes(_full(tree))
    loaded = load_state(d)
    assert loaded.detector is None and loaded.state is not None
    assert loaded.state.cursor == 900
    assert "StateCodecError" in loaded.note and "warming up again" in loaded.note


@pytest.mark.parametrize(("header", "reason"), [
    ({"trainguard": "0.0.1"}, "written by trainguard 0.0.1"),
    ({"version": STATE_VERSION + 1}, "another state version"),
    ({"format": "something-else"}, "not a trainguard watch state"),
])
def test_the_header_is_checked_before_anything_is_built(tmp_path: Path, header: dict[str, Any],
                                                        reason: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    import trainguard.watch.state as state_mod
    real: Callable[[Any], Any] = state_mod.decode
    monkeypatch.setattr(state_mod, "decode", lambda t: built.append("x") or real(t))
    d = _state_dir(tmp_path)
    (d / FULL_NAME).write_bytes(_full({"$id": 0, "$o": "DetectorConfig", "f": {}}, **header))
    loaded = load_state(d)
    assert not built and reason in loaded.note and loaded.detector is None


def test_a_state_file_that_is_not_a_regular_file_is_not_read(tmp_path: Path) -> None:
    d = _state_dir(tmp_path)
    os.mkfifo(d / FULL_NAME)  # reading it would block forever
    loaded = load_state(d)
    assert "not a regular file" in loaded.note and loaded.state is not None


def test_saving_removes_an_old_pickle(tmp_path: Path) -> None:
    (tmp_path / LEGACY_PICKLE_NAME).write_bytes(b"\x80\x04N.")
    save_state(tmp_path, WatchState(cursor=1), None)
    assert not (tmp_path / LEGACY_PICKLE_NAME).exists()
    assert load_state(tmp_path).state is not None


def test_an_alert_saved_by_an_older_trainguard_claims_no_delivery_it_cannot_know() -> None:
    """Older states wrote "acted" for "actions were decided" and marked history as sent and
    acted: read, the decision is kept (actions never run twice), the claims are not."""
    from trainguard.watch.state import LiveAlert

    old = {"node": "n1", "kind": "hard", "start": 0.0, "end": None, "peak": 1.0,
           "source": "detector", "raised_at": 0.0, "stored": True, "sent": True, "acted": True}
    live = LiveAlert.from_dict(old)
    assert (live.decided, live.acted, live.sent, live.stored) == (True, False, True, True)
    history = LiveAlert.from_dict({**old, "end": 5.0, "historical": True})
    assert (history.sent, history.acted) == (False, False)
    again = LiveAlert.from_dict(live.to_dict())
    assert again == live and LiveAlert.from_dict({**live.to_dict(), "acted": True}).acted
