"""The tensor checkpoint engine with real PyTorch (CPU): round trips, async snapshot semantics,
bounded memory, corruption named per file, fallbacks and bad input."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainguard.ckpt import MANIFEST_NAME  # noqa: E402
from trainguard.ckpt.engine import Checkpointer, load_state  # noqa: E402
from trainguard.errors import CheckpointError, ConfigError  # noqa: E402

STRIPE = 4096


def _state(seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    weight = torch.nn.Parameter(torch.randn(64, 300, generator=g))
    big = torch.randn(50_000, generator=g)  # > PAGE_FROM bytes: page aligned in the stream
    return {
        "model": {"weight": weight, "tied": weight, "row": weight[3], "big": big,
                  "t": weight.t(), "bf16": torch.arange(1000, dtype=torch.bfloat16),
                  "i8": torch.randint(-100, 100, (77,), dtype=torch.int8, generator=g),
                  "bool": torch.rand(33, generator=g) > 0.5, "empty": torch.empty(0, 3),
                  "scalar": torch.tensor(2.5, requires_grad=True),
                  "c64": torch.randn(5, dtype=torch.complex64, generator=g)},
        "optimizer": {"state": {0: {"exp_avg": torch.randn(64, 300, generator=g)}},
                      "param_groups": [{"lr": 1e-3, "params": [0]}]},
        "step": 40, "vocab": list("abc"), "note": None,
    }


def _assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and type(a) is type(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert a.requires_grad == b.requires_grad and torch.equal(a.detach(), b.detach())
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("streams", [1, 3, 8])
@pytest.mark.parametrize("checksum", ["crc32", "sha256"])
@pytest.mark.parametrize("direct_io", [True, False])
def test_round_trip(tmp_path: Path, streams: int, checksum: str, direct_io: bool) -> None:
    state = _state()
    ck = Checkpointer(tmp_path, streams=streams, stripe_bytes=STRIPE, checksum=checksum,
                      direct_io=direct_io)
    saved = ck.save(40, state).wait()
    assert saved.path == tmp_path / "step-00000040" and saved.step == 40
    manifest = json.loads((saved.path / MANIFEST_NAME).read_text())
    assert manifest["meta"]["kind"] == "tensors" and manifest["meta"]["world_size"] == 1
    data = sorted(n for n in manifest["files"] if "-data-" in n)
    assert data == [f"rank00000-data-{k:03d}.bin" for k in range(streams)]
    assert all(checksum in manifest["files"][n] for n in data)
    loaded, info, skipped = ck.load_latest()
    assert info is not None and info.step == 40 and skipped == ()
    _assert_same(state, loaded)
    model = loaded["model"]
    assert model["tied"] is model["weight"]  # the same object twice comes back once
    shared = model["weight"].untyped_storage().data_ptr()
    assert model["row"].untyped_storage().data_ptr() == shared
    # each storage is its own: saving one tensor later does not drag the whole checkpoint along
    assert model["bf16"].untyped_storage().nbytes() == 2000


def test_save_returns_after_snapshot_and_later_changes_do_not_leak(tmp_path: Path) -> None:
    state = _state()
    expected = state["model"]["big"].clone()
    ck = Checkpointer(tmp_path, streams=2, stripe_bytes=STRIPE)
    pending = ck.save(1, state)
    state["model"]["big"].add_(1.0)  # training goes on and changes the weights in place
    pending.wait()
    assert pending.done() and pending.exception() is None
    stats = pending.stats
    assert stats.nbytes > 0 and stats.blocking_s >= stats.copy_s >= 0
    loaded = ck.load(tmp_path / "step-00000001")
    assert torch.equal(loaded["model"]["big"], expected)


def test_memory_is_bounded_a_second_save_waits_for_the_first(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, streams=1, stripe_bytes=STRIPE, max_inflight=1, keep_last=5)
    gate = threading.Event()
    import trainguard.ckpt.engine as engine

    real = engine.write_stream

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        gate.wait(10)
        return real(*args, **kwargs)

    engine.write_stream = slow_write  # type: ignore[assignment]
    try:
        first = ck.save(1, _state(1))
        assert not first.done()
        timer = threading.Timer(0.3, gate.set)
        timer.start()
        second = ck.save(2, _state(2))  # must wait for the only buffer
        assert first.done()
        assert second.stats.wait_s >= 0.2
        ck.wait()
    finally:
        engine.write_stream = real  # type: ignore[assignment]
    assert [i.step for i in ck.dir.list()] == [1, 2]
    _assert_same(_state(2), ck.load(tmp_path / "step-00000002"))


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0x40
    path.write_bytes(bytes(data))


def _files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_a_flipped_byte_in_any_file_is_detected_and_named(tmp_path: Path) -> None:
    state = _state()
    ck = Checkpointer(tmp_path / "ck", streams=3, stripe_bytes=STRIPE)
    saved = ck.save(5, state).wait()
    names = _files(saved.path)
    assert len(names) == 6  # 3 data files, structure, tensor table, manifest
    for name in names:
        for where in (0, 4097, -1):
            case = tmp_path / f"case-{name}-{where}"
            shutil.copytree(saved.path, case)
            size = (case / name).stat().st_size
            _flip(case / name, where if where >= 0 else size - 1)
            with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
                load_state(case)


def test_truncated_and_missing_files_are_named(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, streams=2, stripe_bytes=STRIPE)
    saved = ck.save(1, _state()).wait()
    data = saved.path / "rank00000-data-001.bin"
    with data.open("r+b") as f:
        f.truncate(100)
    with pytest.raises(CheckpointError, match=r"size mismatch for rank00000-data-001\.bin"):
        load_state(saved.path)
    data.unlink()
    with pytest.raises(CheckpointError, match=r"missing file rank00000-data-001\.bin"):
        load_state(saved.path)


def test_load_latest_falls_back_past_a_corrupt_checkpoint(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, streams=2, stripe_bytes=STRIPE, keep_last=3)
    for step in (10, 20, 30):
        ck.save(step, _state(step)).wait()
    _flip(tmp_path / "step-00000030" / "rank00000-data-000.bin", 10)
    loaded, info, skipped = ck.load_latest()
    assert info is not None and info.step == 20
    _assert_same(_state(20), loaded)
    assert [(s.step, s.reason) for s in skipped] == [
        (30, "crc32 mismatch for rank00000-data-000.bin: the file is corrupt")]
    loaded, info, skipped = ck.load_latest(max_step=10)
    assert info is not None and info.step == 10 and skipped[-1].reason == "above max_step 10"


def test_keep_last_and_resave_of_the_same_step(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, streams=2, stripe_bytes=STRIPE, keep_last=2)
    for step in (1, 2, 3):
        ck.save(step, {"x": torch.full((10,), float(step))})
    ck.wait()
    assert [i.step for i in ck.dir.list()] == [2, 3]
    ck.save(3, {"x": torch.full((10,), 33.0)}).wait()
    assert ck.load_latest()[0]["x"][0].item() == 33.0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_empty_state_and_no_tensors(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, streams=4, stripe_bytes=STRIPE)
    ck.save(0, {"step": 0, "notes": ["x"]}).wait()
    assert ck.load_latest()[0] == {"step": 0, "notes": ["x"]}


def test_prepare_reserves_the_buffer(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, stripe_bytes=STRIPE)
    state = _state()
    reserved = ck.prepare(state)
    assert reserved >= sum(t.numel() * t.element_size() for t in [state["model"]["big"]])
    assert ck._buffers[0].nbytes >= reserved and ck._buffers[0].aligned
    ck.save(1, state).wait()
    _assert_same(state, ck.load_latest()[0])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"s": torch.randn(3, 3).to_sparse()}, "only dense tensors"),
        ({"m": torch.empty(3, device="meta")}, "only dense tensors"),
        ({"f": lambda: 1}, "cannot checkpoint the state"),
        ({"storage": torch.randn(2).untyped_storage()}, "bare torch storage"),
    ],
)
def test_unsupported_states_raise_a_clear_error(tmp_path: Path, value: Any, message: str) -> None:
    ck = Checkpointer(tmp_path, stripe_bytes=STRIPE)
    with pytest.raises(CheckpointError, match=message):
        ck.save(1, value)
    assert ck.dir.list() == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"streams": 0}, "streams must be an integer >= 1"),
        ({"stripe_bytes": 1000}, "stripe_bytes must be an integer >= 4096"),
        ({"stripe_bytes": 5000}, "multiple of 4096"),
        ({"checksum": "md5"}, "checksum must be one of"),
        ({"max_inflight": 0}, "max_inflight"),
        ({"keep_last": 0}, "keep_last"),
    ],
)
def test_bad_configuration(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Checkpointer(tmp_path, **kwargs)


def test_unwritable_root_fails_in_wait_and_leaves_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    ck = Checkpointer(blocker / "ckpt", stripe_bytes=STRIPE)
    pending = ck.save(1, _state())
    with pytest.raises(CheckpointError, match="cannot create checkpoint directory"):
        pending.wait(30)
    assert isinstance(pending.exception(), CheckpointError)


def test_a_failing_writer_aborts_the_save_and_keeps_the_previous(
    tmp_path: Path, monkeypatch: Any
) -> None:
    ck = Checkpointer(tmp_path, streams=3, stripe_bytes=STRIPE)
    ck.save(1, _state(1)).wait()
    import trainguard.ckpt.engine as engine

    real = engine.write_stream

    def failing(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.name.endswith("-001.bin"):
            raise OSError(28, "No space left on device")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(engine, "write_stream", failing)
    with pytest.raises(CheckpointError, match=r"(?i)no space left"):
        ck.save(2, _state(2)).wait(30)
    assert [i.step for i in ck.dir.list()] == [1]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    _assert_same(_state(1), ck.load_latest()[0])


def test_loading_a_non_tensor_checkpoint_says_so(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, stripe_bytes=STRIPE)
    ck.dir.save_bytes(3, {"state.pt": b"legacy"})
    with pytest.raises(CheckpointError, match="not a tensor checkpoint"):
        ck.load(tmp_path / "step-00000003")


def test_cuda_checkpoint_needs_map_location_without_cuda(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the GPU path is exercised on the device machine")
    ck = Checkpointer(tmp_path, stripe_bytes=STRIPE)
    saved = ck.save(1, {"x": torch.ones(3)}).wait()
    table = saved.path / "rank00000-tensors.json"
    data = json.loads(table.read_text())
    assert data["storages"][0]["device"] == "cpu"
    with pytest.raises(CheckpointError, match="CUDA is not available"):
        load_state(saved.path, map_location="cuda:0")
