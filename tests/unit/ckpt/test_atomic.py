from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from trainguard.ckpt import FORMAT, MANIFEST_NAME, CheckpointDir, CheckpointInfo
from trainguard.ckpt.atomic import STALE_AFTER_S
from trainguard.errors import CheckpointError, ConfigError

DEAD_PID = 999_999_999  # above any pid_max


def _save(ckpts: CheckpointDir, step: int, payload: bytes | None = None) -> None:
    ckpts.save_bytes(
        step, {"model.bin": payload or b"model %d " % step * 100, "opt.bin": b"opt %d" % step}
    )


def _steps(ckpts: CheckpointDir) -> list[int]:
    return [info.step for info in ckpts.list()]


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_save_writes_manifest_and_files(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path / "ckpt")
    saved = ckpts.save_bytes(40, {"model.pt": b"abc", "extra.json": b"{}"})
    assert saved.step == 40 and saved.path == tmp_path / "ckpt" / "step-00000040"
    assert saved.size_bytes == 5 and saved.save_s >= 0
    manifest = json.loads((saved.path / MANIFEST_NAME).read_text())
    assert manifest["format"] == FORMAT == "trainguard-checkpoint/1"
    assert manifest["step"] == 40 and manifest["created"] == pytest.approx(time.time(), abs=60)
    assert manifest["files"]["model.pt"] == {
        "size": 3,
        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    }
    assert _names(saved.path) == ["extra.json", MANIFEST_NAME, "model.pt"]
    assert _names(tmp_path / "ckpt") == ["step-00000040"]  # no temp dir left behind
    [info] = ckpts.list()
    assert info == CheckpointInfo(40, saved.path, manifest["created"], ("extra.json", "model.pt"))
    assert info.file("model.pt").read_bytes() == b"abc"
    assert ckpts.validate(info) is None


def test_writers_stream_into_the_file(tmp_path: Path) -> None:
    def write(f: BinaryIO) -> None:
        for i in range(3):
            f.write(b"chunk %d\n" % i)

    saved = CheckpointDir(tmp_path).save(5, {"log.txt": write})
    assert (saved.path / "log.txt").read_bytes() == b"chunk 0\nchunk 1\nchunk 2\n"


def test_keep_last_prunes_oldest(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path, keep_last=3)
    for step in (10, 20, 30, 40, 50):
        _save(ckpts, step)
    assert _steps(ckpts) == [30, 40, 50]
    assert _names(tmp_path) == ["step-00000030", "step-00000040", "step-00000050"]


def test_saving_an_older_step_drops_newer_abandoned_checkpoints(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path, keep_last=3)
    for step in (10, 20, 30, 40):
        _save(ckpts, step)
    # A rollback resumed from 20 and saved 30 again: the old 40 belongs to the abandoned run.
    _save(ckpts, 30, b"new timeline")
    assert _steps(ckpts) == [20, 30]
    info, _ = ckpts.latest_valid()
    assert info is not None and info.file("model.bin").read_bytes() == b"new timeline"


def test_resave_same_step_replaces_it(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10, b"first")
    _save(ckpts, 10, b"second")
    assert _names(tmp_path) == ["step-00000010"]
    [info] = ckpts.list()
    assert ckpts.validate(info) is None
    assert info.file("model.bin").read_bytes() == b"second"


def test_latest_valid_on_empty_or_missing_root(tmp_path: Path) -> None:
    assert CheckpointDir(tmp_path / "nothing-yet").latest_valid() == (None, ())
    assert CheckpointDir(tmp_path / "nothing-yet").list() == []


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _set_manifest_key(key: str, value: object) -> object:
    def damage(directory: Path) -> None:
        manifest = json.loads((directory / MANIFEST_NAME).read_text())
        manifest[key] = value
        manifest.pop("manifest_sha256")  # as another writer without the self-checksum would
        (directory / MANIFEST_NAME).write_text(json.dumps(manifest))

    return damage


DAMAGE = [
    ("truncated file", lambda d: _truncate(d / "model.bin"), "size mismatch for model.bin"),
    ("flipped byte", lambda d: _flip_byte(d / "model.bin"), "sha256 mismatch for model.bin"),
    ("missing file", lambda d: (d / "opt.bin").unlink(), "missing file opt.bin"),
    ("missing manifest", lambda d: (d / MANIFEST_NAME).unlink(), "missing manifest"),
    (
        "corrupt manifest JSON",
        lambda d: (d / MANIFEST_NAME).write_text('{"format": "trainguard-'),
        "unparsable manifest",
    ),
    ("manifest not an object", lambda d: (d / MANIFEST_NAME).write_text("[]"), "unparsable"),
    ("wrong format", _set_manifest_key("format", "other/2"), "wrong format 'other/2'"),
    (
        "edited manifest",
        lambda d: (d / MANIFEST_NAME).write_text(
            (d / MANIFEST_NAME).read_text().replace('"step": 20', '"step": 10')),
        "manifest.json is corrupt",
    ),
    ("step mismatch", _set_manifest_key("step", 10), "step mismatch: manifest says 10"),
    ("bad files entry", _set_manifest_key("files", {"../x": {}}), "bad file name '../x'"),
]


@pytest.mark.parametrize(("damage", "reason"), [(d, r) for _, d, r in DAMAGE],
                         ids=[name for name, _, _ in DAMAGE])
def test_damaged_newest_checkpoint_is_skipped(tmp_path: Path, damage: object, reason: str) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10)
    _save(ckpts, 20)
    damage(tmp_path / "step-00000020")  # type: ignore[operator]
    infos = ckpts.list()
    assert [i.step for i in infos] == [10, 20]  # listing does not validate
    assert reason in (ckpts.validate(infos[1]) or "")
    info, skipped = ckpts.latest_valid()
    assert info is not None and info.step == 10
    assert [(s.step, s.path.name) for s in skipped] == [(20, "step-00000020")]
    assert reason in skipped[0].reason


def test_max_step_fallback(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path, keep_last=5)
    for step in (10, 20, 30):
        _save(ckpts, step)
    info, skipped = ckpts.latest_valid(max_step=25)
    assert info is not None and info.step == 20
    assert [(s.step, s.reason) for s in skipped] == [(30, "above max_step 25")]
    info, skipped = ckpts.latest_valid(max_step=20)
    assert info is not None and info.step == 20
    assert ckpts.latest_valid(max_step=5)[0] is None
    _flip_byte(tmp_path / "step-00000020" / "model.bin")
    info, skipped = ckpts.latest_valid(max_step=25)
    assert info is not None and info.step == 10
    assert [(s.step, s.reason) for s in skipped] == [
        (30, "above max_step 25"),
        (20, "sha256 mismatch for model.bin"),
    ]


def test_all_damaged_gives_none_with_every_reason(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10)
    (tmp_path / "step-00000010" / MANIFEST_NAME).unlink()
    info, skipped = ckpts.latest_valid()
    assert info is None
    assert [(s.step, s.reason) for s in skipped] == [(10, "missing manifest.json")]


def _leftover(root: Path, kind: str, step: int, pid: int, age_s: float = 0.0) -> Path:
    path = root / f".{kind}-step-{step:08d}-{pid}-abcd1234"
    path.mkdir(parents=True)
    (path / "model.bin").write_bytes(b"partial")
    if age_s:
        old = time.time() - age_s
        os.utime(path, (old, old))
    return path


def test_leftover_temp_dirs_are_ignored_and_cleaned(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10)
    dead = _leftover(tmp_path, "tmp", 20, DEAD_PID)
    live_recent = _leftover(tmp_path, "tmp", 30, os.getpid())
    live_old = _leftover(tmp_path, "tmp", 40, os.getpid(), age_s=STALE_AFTER_S + 60)
    pruned = _leftover(tmp_path, "del", 5, DEAD_PID)
    assert _steps(ckpts) == [10]  # readers ignore them
    assert ckpts.latest_valid()[0] is not None
    _save(ckpts, 20)
    assert not dead.exists() and not live_old.exists() and not pruned.exists()
    assert live_recent.exists()  # maybe a save in progress
    assert _steps(ckpts) == [10, 20]


def test_interrupted_resave_keeps_the_old_checkpoint(tmp_path: Path) -> None:
    """A re-save that died between moving the old copy aside and renaming the new one in."""
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10)
    _save(ckpts, 20, b"old twenty")
    aside = tmp_path / f".old-step-00000020-{DEAD_PID}-abcd1234"
    os.rename(tmp_path / "step-00000020", aside)
    info, skipped = ckpts.latest_valid()
    assert info is not None and info.step == 20 and info.path == aside and skipped == ()
    _save(ckpts, 25)  # the next save restores it under its final name
    assert not aside.exists()
    assert _names(tmp_path) == ["step-00000010", "step-00000020", "step-00000025"]
    info, _ = ckpts.latest_valid(max_step=20)
    assert info is not None and info.file("model.bin").read_bytes() == b"old twenty"


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "/abs", "a\\b", ".hidden", MANIFEST_NAME, "nul\0"]
)
def test_bad_file_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(CheckpointError, match="invalid checkpoint file name"):
        CheckpointDir(tmp_path).save_bytes(1, {name: b"x"})
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("step", [-1, True, 1.5])
def test_bad_step(tmp_path: Path, step: object) -> None:
    with pytest.raises(CheckpointError, match="step must be an integer >= 0"):
        CheckpointDir(tmp_path).save_bytes(step, {"a": b""})  # type: ignore[arg-type]


@pytest.mark.parametrize("keep_last", [0, -1, True, 2.0])
def test_keep_last_must_be_positive(tmp_path: Path, keep_last: object) -> None:
    with pytest.raises(ConfigError, match="keep_last must be an integer >= 1"):
        CheckpointDir(tmp_path, keep_last=keep_last)  # type: ignore[arg-type]


def test_writer_error_removes_temp_dir_and_keeps_old_state(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10)

    def boom(f: BinaryIO) -> None:
        f.write(b"half")
        raise ValueError("cannot pickle lambda")

    with pytest.raises(CheckpointError, match="ValueError: cannot pickle lambda") as info:
        ckpts.save(20, {"a.bin": lambda f: f.write(b"ok") and None, "b.bin": boom})
    assert "step-00000020" in str(info.value) and str(tmp_path) in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert _names(tmp_path) == ["step-00000010"]
    assert ckpts.latest_valid()[0] is not None


def test_disk_full_is_a_checkpoint_error(tmp_path: Path) -> None:
    def full(f: BinaryIO) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(CheckpointError, match="no space left on device"):
        CheckpointDir(tmp_path).save(3, {"model.pt": full})
    assert list(tmp_path.iterdir()) == []


def test_unwritable_root(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores permission bits: a path under a regular file fails for everyone.
        blocker = tmp_path / "file"
        blocker.write_text("not a directory")
        root = blocker / "ckpt"
    else:
        root = tmp_path / "readonly"
        root.mkdir()
        root.chmod(0o500)
    try:
        with pytest.raises(CheckpointError, match="cannot") as info:
            CheckpointDir(root).save_bytes(1, {"a": b"x"})
        assert str(root) in str(info.value)
    finally:
        if root.exists():
            root.chmod(0o700)


def test_missing_file_name_in_info(tmp_path: Path) -> None:
    _save(CheckpointDir(tmp_path), 1)
    [info] = CheckpointDir(tmp_path).list()
    with pytest.raises(CheckpointError, match=r"has no file 'state\.pt'"):
        info.file("state.pt")


def test_non_checkpoint_entries_are_ignored(tmp_path: Path) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10)
    (tmp_path / "step-12").mkdir()  # not zero padded: not ours
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "step-00000099").write_text("a file, not a dir")
    assert _steps(ckpts) == [10]


def test_failed_final_rename_of_a_resave_restores_the_old_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpts = CheckpointDir(tmp_path)
    _save(ckpts, 10, b"original")
    real_rename = os.rename

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(src).name.startswith(".tmp-"):
            raise OSError(errno.EIO, "Input/output error")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(CheckpointError, match="Input/output error"):
        _save(ckpts, 10, b"replacement")
    monkeypatch.undo()
    assert _names(tmp_path) == ["step-00000010"]
    info, _ = ckpts.latest_valid()
    assert info is not None and info.file("model.bin").read_bytes() == b"original"
