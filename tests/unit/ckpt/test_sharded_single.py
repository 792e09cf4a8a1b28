"""The sharded save/load path of `Checkpointer` in one process, with a one-rank stand-in for
``torch.distributed`` (the multi-process run is tests/integration/test_ckpt_sharded.py): rank 0
publishes, collects and commits its shard; a load that fails names the checkpoint it skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainguard.ckpt import sharded  # noqa: E402
from trainguard.ckpt.engine import Checkpointer  # noqa: E402


class OneRank:
    """The few ``torch.distributed`` calls `sharded` makes, for a group of one."""

    def get_rank(self, group: Any = None) -> int:
        return 0

    def get_world_size(self, group: Any = None) -> int:
        return 1

    def get_global_rank(self, group: Any, rank: int) -> int:
        return rank

    def broadcast_object_list(self, box: list[Any], src: int, group: Any = None) -> None:
        assert src == 0

    def all_gather_object(self, out: list[Any], obj: Any, group: Any = None) -> None:
        out[0] = obj


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharded, "_dist", OneRank)


@pytest.mark.usefixtures("one_rank")
def test_sharded_round_trip_in_one_rank(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, sharded=True, streams=2, stripe_bytes=4096, keep_last=2)
    state = {"w": torch.arange(5000, dtype=torch.float32), "step": 7}
    saved = ckpt.save(7, state).wait()
    assert saved.step == 7 and saved.path == tmp_path / "step-00000007"
    assert not list(tmp_path.glob(".tmp-*"))
    loaded, info, skipped = ckpt.load_latest()
    assert info is not None and info.step == 7 and skipped == ()
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 7


@pytest.mark.usefixtures("one_rank")
def test_sharded_load_skips_a_corrupt_newest_checkpoint(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, sharded=True, streams=1, stripe_bytes=4096, keep_last=3)
    for step in (1, 2):
        ckpt.save(step, {"w": torch.full((4096,), float(step))}).wait()
    data = sorted((tmp_path / "step-00000002").glob("*-data-*.bin"))[0]
    raw = bytearray(data.read_bytes())
    raw[10] ^= 0xFF
    data.write_bytes(bytes(raw))
    loaded, info, skipped = ckpt.load_latest()
    assert info is not None and info.step == 1
    assert float(loaded["w"][0]) == 1.0
    assert [s.step for s in skipped] == [2]
    assert "rank 0" in skipped[0].reason and data.name in skipped[0].reason
