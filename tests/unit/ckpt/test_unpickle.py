"""Checkpoint loads are restricted by default: a pickled gadget is refused (named, and nothing
runs); training states (model, AdamW, schedulers, RNG states, numpy) load as they are."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import trainguard.train as tg  # noqa: E402
from trainguard.ckpt import MANIFEST_NAME  # noqa: E402
from trainguard.ckpt.engine import Checkpointer  # noqa: E402
from trainguard.ckpt.tensors import capture, rebuild  # noqa: E402
from trainguard.ckpt.unpickle import SAFE_GLOBALS  # noqa: E402
from trainguard.errors import CheckpointError  # noqa: E402
from trainguard.train import Checkpoints, Session, TrainEnv  # noqa: E402


def _gadgets(marker: Path) -> dict[str, tuple[bytes, str]]:
    """Protocol-0 pickles that create `marker` when unpickled unrestricted, and the global a
    restricted load must name (the first one the pickle resolves)."""
    touch = f"touch {marker}".encode()
    code = f"open({str(marker)!r}, 'w').close()".encode()
    return {
        "builtins.exec": (b"cbuiltins\nexec\n(S'" + code.replace(b"'", b"\\'") + b"'\ntR.",
                          "builtins.exec"),
        "os.system": (b"cos\nsystem\n(S'" + touch + b"'\ntR.", "os.system"),
        "posix.system": (b"cposix\nsystem\n(S'" + touch + b"'\ntR.", "posix.system"),
        "subprocess.Popen": (b"csubprocess\nPopen\n((S'touch'\nS'" + str(marker).encode()
                             + b"'\nltR.", "subprocess.Popen"),
        "builtins.getattr": (b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(S'os'\ntRS'system'\n"
                             b"tR(S'" + touch + b"'\ntR.", "builtins.getattr"),
        "__import__": (b"cbuiltins\n__import__\np0\n0cbuiltins\ngetattr\n(g0\n(S'os'\ntR"
                       b"S'system'\ntR(S'" + touch + b"'\ntR.", "builtins.__import__"),
        # protocol 4: STACK_GLOBAL of ("os", "path.os.system"), a dotted name that resolves
        "dotted name": (b"\x80\x04\x8c\x02os\x8c\x0epath.os.system\x93\x8c"
                        + bytes([len(touch)]) + touch + b"\x85R.", "os.path.os.system"),
    }


GADGETS = list(_gadgets(Path("/x")))


@pytest.mark.parametrize("name", GADGETS)
def test_gadgets_are_real_when_trusted(tmp_path: Path, name: str) -> None:
    """The control: unpickled trusted, each gadget does create the marker."""
    marker = tmp_path / "pwned"
    data, _ = _gadgets(marker)[name]
    result = rebuild(data, [], trusted=True)
    if isinstance(result, subprocess.Popen):
        assert result.wait() == 0
    assert marker.exists()


@pytest.mark.parametrize("name", GADGETS)
def test_gadgets_are_refused_by_default(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "pwned"
    data, qualified = _gadgets(marker)[name]
    with pytest.raises(CheckpointError, match="restricted load refuses") as refused:
        rebuild(data, [])
    assert f"the global {qualified!r}" in str(refused.value)
    assert "pass trusted=True" in str(refused.value)
    assert not marker.exists()


def _replace_structure(step_dir: Path, structure: bytes) -> None:
    """Put a crafted structure into an engine checkpoint with a manifest that vouches for it."""
    (step_dir / "rank00000-state.pkl").write_bytes(structure)
    manifest = json.loads((step_dir / MANIFEST_NAME).read_text())
    manifest.pop("manifest_sha256")
    manifest["files"]["rank00000-state.pkl"] = {
        "size": len(structure), "sha256": hashlib.sha256(structure).hexdigest()}
    (step_dir / MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.mark.parametrize("name", GADGETS)
def test_engine_and_sdk_refuse_a_gadget_checkpoint(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "pwned"
    data, qualified = _gadgets(marker)[name]
    ckpt = Checkpointer(tmp_path / "ckpt", stripe_bytes=4096)
    saved = ckpt.save(10, {"w": torch.ones(4)}).wait()
    _replace_structure(saved.path, data)
    with pytest.raises(CheckpointError, match=f"the global {qualified!r}"):
        ckpt.load(saved.path)
    ckpts = Checkpoints(tmp_path / "ckpt", session=Session(TrainEnv()))
    with pytest.raises(CheckpointError, match=r"step 10 .*restricted load refuses.*trusted=True"):
        tg.load_torch(ckpts)
    assert tg.load_torch(ckpts, allow_fresh_start=True) == (None, 0)
    tg.save_torch(ckpts, 10, {"w": torch.zeros(4)})  # a re-save keeps the refused one aside
    assert [p.name[:24] for p in (tmp_path / "ckpt").glob("unreadable-*")] == [
        "unreadable-step-00000010"]
    assert not marker.exists()


class Gadget:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_torch_save_files_load_with_weights_only(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    ckpts = Checkpoints(tmp_path / "ckpt", session=Session(TrainEnv()))
    tg.save_torch(ckpts, 10, {"x": Gadget(marker)}, name="model.pt")
    with pytest.raises(CheckpointError,
                       match=r"model\.pt needs the global 'posix\.system'.*trusted=True"):
        tg.load_torch(ckpts, name="model.pt")
    assert not marker.exists()
    tg.save_torch(ckpts, 20, {"x": torch.ones(2), "n": 3}, name="model.pt")
    obj, step = tg.load_torch(ckpts, name="model.pt")
    assert step == 20 and obj["n"] == 3


class Custom:
    def __init__(self, value: int) -> None:
        self.value = value


def test_other_objects_need_trusted(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, stripe_bytes=4096)
    saved = ckpt.save(1, {"cfg": Custom(7), "w": torch.ones(3)}).wait()
    with pytest.raises(CheckpointError, match=rf"global '{__name__}\.Custom'.*trusted=True"):
        ckpt.load(saved.path)
    loaded = ckpt.load(saved.path, trusted=True)
    assert loaded["cfg"].value == 7 and torch.equal(loaded["w"], torch.ones(3))
    state, info, _ = ckpt.load_latest(trusted=True)
    assert info is not None and state["cfg"].value == 7


def _training_state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "step": 40, "vocab": list("abc"),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "numpy": np.random.get_state(),
                "numpy_gen": np.random.default_rng(1).bit_generator.state},
        "misc": {"dtype": torch.bfloat16, "size": torch.Size([2, 3]),
                 "device": torch.device("cpu"), "layout": torch.strided,
                 "ordered": collections.OrderedDict(a=1), "set": {1, 2}, "frozen": frozenset("x"),
                 "complex": 1 + 2j, "bytes": b"\x00\x01", "bytearray": bytearray(b"ab"),
                 "array": np.arange(6.0).reshape(2, 3).T, "scalar": np.float32(1.5),
                 "objects": np.array([1, "a", None], dtype=object), "none": None,
                 "nan": float("nan"), "big": 2**100},
    }


def test_training_states_load_restricted(tmp_path: Path) -> None:
    state = _training_state()
    ckpt = Checkpointer(tmp_path, stripe_bytes=4096)
    saved = ckpt.save(40, state).wait()
    loaded = ckpt.load(saved.path)
    assert str(loaded["optimizer"]) == str(state["optimizer"])
    assert loaded["rng"]["python"] == state["rng"]["python"]
    random.setstate(loaded["rng"]["python"])
    np.random.set_state(loaded["rng"]["numpy"])
    torch.set_rng_state(loaded["rng"]["torch"])
    assert loaded["rng"]["numpy_gen"] == state["rng"]["numpy_gen"]
    misc, expected = loaded["misc"], state["misc"]
    for key in ("dtype", "size", "device", "layout", "ordered", "set", "frozen", "complex",
                "bytes", "bytearray", "none", "big", "scalar"):
        assert misc[key] == expected[key] and type(misc[key]) is type(expected[key]), key
    assert np.array_equal(misc["array"], expected["array"]) and misc["nan"] != misc["nan"]
    assert list(misc["objects"]) == [1, "a", None]
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8))
    model.load_state_dict(loaded["model"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    optimizer.load_state_dict(loaded["optimizer"])


def test_allowlist_is_exact_names() -> None:
    for module, name in SAFE_GLOBALS:
        assert "*" not in module + name and "." not in name
    structure = capture({"t": torch.float16}).structure
    assert rebuild(structure, [])["t"] is torch.float16
