"""A save never removes a checkpoint this process could not read (`trainguard.ckpt.retention`):
not by retention, not as an abandoned timeline, not by a re-save of its step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.ckpt import MANIFEST_NAME, CheckpointDir
from trainguard.ckpt.retention import UNKNOWN, Ledger, doomed_steps


def _files(root: Path) -> dict[str, dict[str, bytes]]:
    """Every directory under `root` -> its files' contents."""
    return {d.name: {f.name: f.read_bytes() for f in d.iterdir()}
            for d in sorted(root.iterdir()) if d.is_dir()}


def _newer_format(step_dir: Path) -> None:
    manifest = json.loads((step_dir / MANIFEST_NAME).read_text())
    manifest["format"] = "trainguard-checkpoint/2"
    manifest.pop("manifest_sha256")
    (step_dir / MANIFEST_NAME).write_text(json.dumps(manifest))


def _unknown_checksum(step_dir: Path) -> None:
    manifest = json.loads((step_dir / MANIFEST_NAME).read_text())
    for entry in manifest["files"].values():
        entry["xxh3"] = entry.pop("sha256")[:16]
    manifest.pop("manifest_sha256")
    (step_dir / MANIFEST_NAME).write_text(json.dumps(manifest))


def _damaged(step_dir: Path) -> None:
    path = step_dir / "model.bin"
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))


UNREADABLE = {"newer format": _newer_format, "unknown checksum": _unknown_checksum,
              "damaged": _damaged}


def _earlier_run(root: Path, steps: tuple[int, ...], damage: object = None) -> None:
    """Checkpoints written by another process (so this one's ledger knows nothing of them)."""
    other = CheckpointDir(root, keep_last=10)
    for step in steps:
        other.save_bytes(step, {"model.bin": b"earlier run, step %d" % step})
        if damage is not None:
            damage(root / f"step-{step:08d}")  # type: ignore[operator]


@pytest.mark.parametrize("damage", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_saves_from_step_0_keep_every_unreadable_checkpoint(
    tmp_path: Path, damage: object
) -> None:
    _earlier_run(tmp_path, (10, 20, 30), damage)
    before = _files(tmp_path)
    ckpts = CheckpointDir(tmp_path, keep_last=2)
    for step in range(0, 60, 5):  # abandoned-timeline pruning, retention, re-saves of 10/20/30
        ckpts.save_bytes(step, {"model.bin": b"new run, step %d" % step})
    after = _files(tmp_path)
    kept = list(after.values())
    for name, files in before.items():
        assert files in kept, f"{name} was removed"
    moved = sorted(n for n in after if n.startswith("unreadable-"))
    assert [n[: len("unreadable-step-00000010")] for n in moved] == [
        "unreadable-step-00000010", "unreadable-step-00000020", "unreadable-step-00000030"]
    assert [i.step for i in ckpts.list()] == [50, 55]  # the new run keeps its newest two
    assert ckpts.latest_valid()[0].step == 55  # type: ignore[union-attr]


def test_unreadable_checkpoints_do_not_count_towards_keep_last(tmp_path: Path) -> None:
    _earlier_run(tmp_path, (10, 20, 30), _newer_format)
    ckpts = CheckpointDir(tmp_path, keep_last=2)
    for step in (5, 40, 50):
        ckpts.save_bytes(step, {"model.bin": b"%d" % step})
    assert [i.step for i in ckpts.list()] == [10, 20, 30, 40, 50]


def test_a_readable_abandoned_timeline_is_still_pruned(tmp_path: Path) -> None:
    """A rollback: checkpoints above the resume bound are validated, then removed."""
    _earlier_run(tmp_path, (10, 20, 30, 40))
    ckpts = CheckpointDir(tmp_path, keep_last=3)
    info, _ = ckpts.latest_valid(max_step=20)
    assert info is not None and info.step == 20
    ckpts.save_bytes(30, {"model.bin": b"new timeline"})
    assert [i.step for i in ckpts.list()] == [10, 20, 30]
    assert not list(tmp_path.glob("unreadable-*"))


def test_a_checkpoint_a_load_rejected_is_kept_even_if_it_validates(tmp_path: Path) -> None:
    _earlier_run(tmp_path, (10, 20))
    ckpts = CheckpointDir(tmp_path, keep_last=1)
    [ten, twenty] = ckpts.list()
    ckpts.ledger.note(twenty.path, "refused global 'os.system'")  # as a loader reports it
    ckpts.save_bytes(15, {"model.bin": b"15"})
    assert [i.step for i in ckpts.list()] == [15, 20]  # 10 pruned by retention, 20 kept
    assert ten.path.exists() is False and twenty.path.exists()


def test_ledger_forgets_a_directory_replaced_behind_its_back(tmp_path: Path) -> None:
    _earlier_run(tmp_path, (10,))
    path = tmp_path / "step-00000010"
    ledger = Ledger()
    ledger.note(path, None)
    assert ledger.verdict(path) is None
    manifest = path / MANIFEST_NAME
    text = manifest.read_text()
    manifest.unlink()
    manifest.write_text(text + " ")  # another writer's manifest: a different file
    assert ledger.verdict(path) is UNKNOWN
    assert ledger.verdict(tmp_path / "missing") is UNKNOWN


@pytest.mark.parametrize(("steps", "saved", "keep", "unreadable", "doomed"), [
    ([10, 20, 30], 30, 3, (), []),
    ([10, 20, 30, 40], 40, 3, (), [10]),
    ([10, 20, 30, 40], 20, 3, (), [30, 40]),
    ([10, 20, 30, 40], 20, 1, (), [30, 40, 10]),
    ([0, 10, 20, 30, 40], 40, 2, (10, 20, 30), []),
    ([0, 10, 20, 30, 40], 40, 1, (10, 20, 30), [0]),
    ([10, 20, 30], 0, 3, (10, 20, 30), [10, 20, 30]),  # still candidates: the rule keeps them
])
def test_doomed_steps(steps: list[int], saved: int, keep: int, unreadable: tuple[int, ...],
                      doomed: list[int]) -> None:
    assert doomed_steps(steps, saved, keep, unreadable) == doomed
