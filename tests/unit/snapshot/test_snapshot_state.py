"""A training state through a slot payload and back, bit for bit (real torch, CPU).

(Named test_snapshot_state.py: tests/unit/watch/test_state.py takes the plain name.)
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainguard.errors import SnapshotError  # noqa: E402
from trainguard.snapshot.state import (  # noqa: E402
    MAX_OBJECT_BYTES,
    load_state,
    plan_state,
    write_state,
)


def _round_trip(state: Any, *, threads: int = 1, copy: bool = True) -> tuple[Any, bytearray]:
    plan = plan_state(state)
    buf = bytearray(plan.payload_bytes)
    write_state(plan, memoryview(buf), threads)
    return load_state(memoryview(buf), copy=copy, threads=threads), buf


def _bits(t: Any) -> bytes:
    return bytes(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())


def _trained() -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 8)).pow(2).mean().backward()
        opt.step()
    return model, opt


@pytest.mark.parametrize("threads", [1, 3])
def test_model_and_optimizer_round_trip_bit_for_bit(threads: int) -> None:
    model, opt = _trained()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3,
             "vocab": ["a", "b"]}
    back, _ = _round_trip(state, threads=threads)
    assert back["step"] == 3 and back["vocab"] == ["a", "b"]
    assert list(back["model"]) == list(state["model"])
    for key, value in state["model"].items():
        assert _bits(back["model"][key]) == _bits(value), key
    assert back["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    for pid, slots in state["optimizer"]["state"].items():
        for name, value in slots.items():
            assert _bits(back["optimizer"]["state"][pid][name]) == _bits(value), (pid, name)
    # The rebuilt optimizer continues exactly like the original.
    model2, opt2 = _trained()
    model2.load_state_dict(back["model"])
    opt2.load_state_dict(back["optimizer"])
    x = torch.randn(5, 8)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    for p1, p2 in zip(model.parameters(), model2.parameters(), strict=True):
        assert _bits(p1) == _bits(p2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int64", "bool", "uint8"])
def test_dtypes(dtype: str) -> None:
    gen = torch.Generator().manual_seed(1)
    t = (torch.randn(7, 3, generator=gen) * 100).to(getattr(torch, dtype))
    back, _ = _round_trip({"t": t})
    assert back["t"].dtype == t.dtype and back["t"].shape == t.shape
    assert _bits(back["t"]) == _bits(t)


def test_non_contiguous_zero_size_and_shared_storage() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {"t": base.t(), "slice": base[1:3, ::2], "base": base, "empty": torch.empty(0, 5),
             "tied": [base, base], "neg_zero": torch.tensor([-0.0, float("nan")])}
    back, _ = _round_trip(state)
    assert back["t"].stride() == (1, 6) and torch.equal(back["t"], base.t())
    assert torch.equal(back["slice"], base[1:3, ::2])
    assert back["empty"].shape == (0, 5)
    assert back["tied"][0] is back["tied"][1] is back["base"]  # the same object comes back
    back["base"][1, 0] = 1000.0  # views still share their storage
    assert back["t"][0, 1] == 1000.0 and back["slice"][0, 0] == 1000.0
    assert _bits(back["neg_zero"]) == _bits(state["neg_zero"])


def test_parameters_keep_requires_grad() -> None:
    p = torch.nn.Parameter(torch.randn(3))
    back, _ = _round_trip({"p": p, "g": torch.randn(2).requires_grad_()})
    assert isinstance(back["p"], torch.nn.Parameter) and back["p"].requires_grad
    assert back["g"].requires_grad


def test_restored_tensors_own_their_memory_unless_asked() -> None:
    t = torch.arange(1000, dtype=torch.int64)
    back, buf = _round_trip({"t": t})
    buf[:] = bytes(len(buf))  # the slot is overwritten by the next snapshot
    assert torch.equal(back["t"], t)
    viewed, buf2 = _round_trip({"t": t}, copy=False)
    assert torch.equal(viewed["t"], t)
    offset = plan_state({"t": t}).offsets[0]
    buf2[offset:offset + 8] = (7).to_bytes(8, "little")
    assert viewed["t"][0] == 7  # a view of the payload, as asked


def test_unpicklable_object_is_named_by_key_path() -> None:
    _, opt = _trained()
    state = {"optimizer": opt.state_dict()}
    state["optimizer"]["state"][3] = {"lock": threading.Lock()}
    with pytest.raises(SnapshotError, match=r"^state\['optimizer'\]\['state'\]\[3\]\['lock'\] "
                       r"cannot be snapshotted: TypeError: cannot pickle '_thread.lock'"):
        plan_state(state)


def test_oversized_object_is_named_with_its_size() -> None:
    state = {"model": {"w": torch.zeros(4)}, "cache": [1, {"blob": b"x" * (MAX_OBJECT_BYTES + 1)}]}
    with pytest.raises(SnapshotError, match=r"^state\['cache'\]\[1\]\['blob'\] cannot be "
                       r"snapshotted: 64\.0 MiB pickled, over the 64 MiB limit"):
        plan_state(state)
    # Tensors of any size are not limited: only pickled objects are.
    assert plan_state({"w": torch.zeros(MAX_OBJECT_BYTES // 4 + 16)}).tensor_bytes > \
        MAX_OBJECT_BYTES


def test_payload_layout_is_aligned_and_sized() -> None:
    plan = plan_state({"a": torch.zeros(3), "b": torch.zeros(5000, dtype=torch.uint8)})
    assert all(offset % 4096 == 0 for offset in plan.offsets)
    assert plan.payload_bytes >= plan.offsets[-1] + 5000
    with pytest.raises(SnapshotError, match="smaller than the state"):
        write_state(plan, memoryview(bytearray(plan.payload_bytes - 1)))


def test_foreign_payload_is_refused() -> None:
    with pytest.raises(SnapshotError, match="does not hold a trainguard state"):
        load_state(memoryview(bytearray(4096)))
    _, buf = _round_trip({"t": torch.zeros(2)})
    with pytest.raises(SnapshotError, match="does not hold a trainguard state"):
        load_state(memoryview(buf)[:40])
