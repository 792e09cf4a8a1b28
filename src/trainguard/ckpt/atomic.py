"""Atomic, self-validating checkpoint directories: ``<root>/step-00000040/`` + ``manifest.json``.

A save never leaves a half-written checkpoint under a final name:

1. write every file into ``<root>/.tmp-step-00000040-<pid>-<random>/``, fsync each;
2. write ``manifest.json`` (sizes and SHA-256 of the files) last, fsync it and the temp dir;
3. if ``step-00000040`` already exists (a re-save after a restart), rename it aside to
   ``.old-step-00000040-<pid>-<random>``;
4. ``os.rename`` the temp dir to ``step-00000040`` and fsync ``<root>``; remove the old one.

A crash before 3 leaves the old state plus an ignored ``.tmp-*`` dir; a crash between 3 and 4
leaves the old checkpoint under its ``.old-*`` name, which readers use in place of the missing
final dir (and the next save renames back). Leftovers are removed by the next save once they are
stale: older than an hour, or made by a process that no longer runs on this host.

Readers never trust a directory name alone: `CheckpointDir.validate` re-hashes every file.
Nothing this process could not read is ever removed by a save (`trainguard.ckpt.retention`).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from trainguard.ckpt.epoch import StaleEpochError, check_epoch, claim_epoch, withdraw_if_fenced
from trainguard.ckpt.manifest import (
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    check_file_name,
    parse_step_dirname,
    read_manifest,
    step_dirname,
    validate_manifest,
)
from trainguard.ckpt.retention import UNKNOWN, Ledger, doomed_steps
from trainguard.errors import CheckpointError, ConfigError

__all__ = [
    "CheckpointDir",
    "CheckpointInfo",
    "SavedCheckpoint",
    "SkippedCheckpoint",
    "StagedCheckpoint",
    "Writer",
    "bytes_writer",
    "new_tag",
]

logger = logging.getLogger(__name__)

Writer = Callable[[BinaryIO], None]
"""Writes one file of a checkpoint into the open binary file it is given."""

STALE_AFTER_S = 3600.0
"""A leftover temp dir of a live process is removed only after this long."""

# .tmp: being written; .old: the previous copy of a re-saved step; .del: being pruned.
_LEFTOVER_RE = re.compile(r"\.(tmp|old|del)-(step-[0-9]{8,})-([0-9]+)-[0-9a-f]+")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One checkpoint directory as listed (not yet validated)."""

    step: int
    """Training step, from the directory name."""
    path: Path
    """The checkpoint directory."""
    created: float
    """Unix time of the save (the directory's mtime when the manifest is unreadable)."""
    files: tuple[str, ...]
    """File names in the checkpoint, without the manifest."""

    def file(self, name: str) -> Path:
        """Path of one file of the checkpoint; `CheckpointError` if it has no such file."""
        if name not in self.files:
            have = ", ".join(self.files) or "no files"
            raise CheckpointError(f"checkpoint {self.path} has no file {name!r} (has {have})")
        return self.path / name


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    """The result of a successful save."""

    step: int
    """Training step."""
    path: Path
    """Final checkpoint directory."""
    size_bytes: int
    """Total size of the checkpoint's files (without the manifest)."""
    save_s: float
    """Wall seconds the save took, fsyncs included."""


@dataclass(frozen=True, slots=True)
class StagedCheckpoint:
    """A checkpoint being written: its files go into `tmp`; `commit` renames it to `final`."""

    step: int
    """Training step."""
    tmp: Path
    """The temporary directory (``.tmp-step-XXXXXXXX-<pid>-<hex>``)."""
    final: Path
    """The directory it becomes (``step-XXXXXXXX``)."""


@dataclass(frozen=True, slots=True)
class SkippedCheckpoint:
    """A checkpoint passed over when looking for one to resume from, and why."""

    step: int
    """Training step."""
    path: Path
    """Checkpoint directory."""
    reason: str
    """E.g. ``sha256 mismatch for model.pt`` or ``above max_step 30``."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return False
    return True


def _sync_and_hash(path: Path) -> FileEntry:
    """fsync a written file and hash what is on disk (one read; the pages are still cached)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        size = 0
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return FileEntry(size=size, digest=digest.hexdigest())


def new_tag(step: int) -> str:
    """A fresh temp-dir tag for `step` (see `CheckpointDir.stage`)."""
    return _tag(step)


def _tag(step: int) -> str:
    """``step-00000040-<pid>-<random>``: the suffix of this process's temporary dir names."""
    return f"{step_dirname(step)}-{os.getpid()}-{secrets.token_hex(4)}"


def _rmtree_quiet(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _what(exc: BaseException) -> str:
    """The reason an I/O step failed, for an error message."""
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return "no space left on device"
        return exc.strerror or str(exc)
    return f"{type(exc).__name__}: {exc}"


def bytes_writer(data: bytes) -> Writer:
    """A `Writer` that writes `data`."""

    def write(f: BinaryIO) -> None:
        f.write(data)

    return write


class CheckpointDir:
    """A directory of atomic, hash-checked checkpoints, newest `keep_last` kept.

    >>> import tempfile
    >>> ckpts = CheckpointDir(tempfile.mkdtemp(), keep_last=2)
    >>> for step in (10, 20, 30):
    ...     _ = ckpts.save_bytes(step, {"model.bin": b"weights at %d" % step})
    >>> [info.step for info in ckpts.list()]
    [20, 30]
    >>> info, skipped = ckpts.latest_valid()
    >>> info.step, info.file("model.bin").read_bytes(), skipped
    (30, b'weights at 30', ())
    """

    def __init__(self, root: str | os.PathLike[str], keep_last: int = 3, *,
                 attempt: int | None = None) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ConfigError(f"checkpoint keep_last must be an integer >= 1, got {keep_last!r}")
        if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int)
                                    or attempt < 0):
            raise ConfigError(f"checkpoint attempt must be an integer >= 0, got {attempt!r}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.attempt = attempt
        """The supervisor's attempt this process belongs to (None: unsupervised). Saves of an
        attempt older than the directory's epoch are refused (`trainguard.ckpt.epoch`)."""
        self.ledger = Ledger()
        """What this process knows of each checkpoint (see `trainguard.ckpt.retention`)."""
        self._kept_warned: set[Path] = set()

    def __repr__(self) -> str:
        return f"CheckpointDir({str(self.root)!r}, keep_last={self.keep_last})"

    # ---- writing -------------------------------------------------------------------------

    def save(self, step: int, writers: Mapping[str, Writer]) -> SavedCheckpoint:
        """Write one checkpoint atomically: each writer fills the file named by its key.

        Raises `CheckpointError` (naming the path) for bad names, I/O errors or a writer that
        raises; the temp dir is removed and the previous state is untouched.
        """
        for name in writers:
            check_file_name(name)
        started = time.monotonic()
        staged = self.stage(step)
        current = staged.tmp
        try:
            entries: dict[str, FileEntry] = {}
            for name, writer in writers.items():
                current = staged.final / name
                with (staged.tmp / name).open("wb") as f:
                    writer(f)
                entries[name] = _sync_and_hash(staged.tmp / name)
        except BaseException as exc:
            self.abort(staged)
            if not isinstance(exc, Exception):
                raise
            raise CheckpointError(
                f"cannot save checkpoint step {step} at {current}: {_what(exc)}"
            ) from exc
        return self.commit(staged, entries, started=started)

    def stage(self, step: int, *, tag: str | None = None, clean: bool = True) -> StagedCheckpoint:
        """Create the temp dir a checkpoint of `step` is written into (step 1 of the outline).

        `tag` (``step-XXXXXXXX-<pid>-<hex>``) names a temp dir shared by several writers (the
        ranks of a sharded save agree on it); an existing one is reused. `clean` removes stale
        leftovers of earlier saves first: only one writer of a shared directory should.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CheckpointError(f"checkpoint step must be an integer >= 0, got {step!r}")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(
                f"cannot create checkpoint directory {self.root}: {exc.strerror or exc}"
            ) from exc
        self.fence(f"checkpoint step {step}")
        if clean:
            self._clean_leftovers()
        tmp = self.root / f".tmp-{tag or _tag(step)}"
        try:
            tmp.mkdir(exist_ok=tag is not None)
        except OSError as exc:
            raise CheckpointError(
                f"cannot save checkpoint step {step} at {tmp}: {_what(exc)}"
            ) from exc
        return StagedCheckpoint(step=step, tmp=tmp, final=self.root / step_dirname(step))

    def fence(self, what: str) -> None:
        """`StaleEpochError` when a newer attempt uses this directory; else record this
        attempt as the directory's epoch (a no-op when unsupervised)."""
        claim_epoch(self.root, self.attempt, what)

    def abort(self, staged: StagedCheckpoint) -> None:
        """Remove a staged checkpoint's temp dir."""
        _rmtree_quiet(staged.tmp)

    def commit(
        self,
        staged: StagedCheckpoint,
        entries: Mapping[str, FileEntry],
        *,
        meta: Mapping[str, object] | None = None,
        started: float | None = None,
    ) -> SavedCheckpoint:
        """Write the manifest of files already written and synced in `staged.tmp`, then rename
        the temp dir to its final name (steps 2-4 of the outline) and prune old checkpoints.

        On failure the temp dir is removed, the previous state is untouched, and
        `CheckpointError` names the path.
        """
        step, tmp, final = staged.step, staged.tmp, staged.final
        started = time.monotonic() if started is None else started
        aside: Path | None = None
        current = final / MANIFEST_NAME
        try:
            manifest = Manifest(step=step, created=time.time(), files=dict(entries),
                                meta=dict(meta or {}))
            with (tmp / MANIFEST_NAME).open("w", encoding="utf-8") as mf:
                mf.write(manifest.to_json())
                mf.flush()
                os.fsync(mf.fileno())
            _fsync_dir(tmp)
            current = final
            check_epoch(self.root, self.attempt, f"checkpoint step {step}")
            if final.exists():
                unreadable = self._keep_reason(CheckpointInfo(step, final, 0.0, ()))
                # An unreadable one is moved aside for good instead (see the retention rule).
                kind = ".old-" if unreadable is None else "unreadable-"
                aside = self.root / f"{kind}{tmp.name.removeprefix('.tmp-')}"
                os.rename(final, aside)
                if unreadable is not None:
                    logger.warning("moved checkpoint %s to %s instead of replacing it: it could "
                                   "not be read (%s)", final, aside, unreadable)
            os.rename(tmp, final)
            _fsync_dir(self.root)
            withdraw_if_fenced(self.root, self.attempt, staged.final,
                               self.root / f".del-{staged.tmp.name.removeprefix('.tmp-')}")
        except BaseException as exc:
            _rmtree_quiet(tmp)
            if aside is not None and not final.exists():
                with contextlib.suppress(OSError):  # else readers use the .old- dir as is
                    os.rename(aside, final)
            if not isinstance(exc, Exception) or isinstance(exc, StaleEpochError):
                raise
            raise CheckpointError(
                f"cannot save checkpoint step {step} at {current}: {_what(exc)}"
            ) from exc
        if aside is not None and aside.name.startswith(".old-"):
            _rmtree_quiet(aside)
        self.ledger.note(final, None)  # written here: ours to prune
        saved = SavedCheckpoint(
            step=step,
            path=final,
            size_bytes=sum(entry.size for entry in entries.values()),
            save_s=time.monotonic() - started,
        )
        logger.info("saved checkpoint %s (%d bytes, %.3f s)", final, saved.size_bytes, saved.save_s)
        self._prune(step)
        return saved

    def save_bytes(self, step: int, files: Mapping[str, bytes]) -> SavedCheckpoint:
        """`save` for contents already in memory."""
        return self.save(step, {name: bytes_writer(data) for name, data in files.items()})

    def _prune(self, saved_step: int) -> None:
        """Drop checkpoints beyond the newest `keep_last`, and any newer than `saved_step`,
        except those this process could not read (`trainguard.ckpt.retention`).

        Saving step N after a resume means every checkpoint above N belongs to an abandoned
        timeline (e.g. a rollback to before a NaN); keeping it would let a later restart resume
        from it.
        """
        infos = {info.step: info for info in self.list()}
        unreadable = {step for step, info in infos.items()
                      if self.ledger.verdict(info.path) not in (None, UNKNOWN)}
        for step in doomed_steps(list(infos), saved_step, self.keep_last, unreadable):
            info = infos[step]
            reason = self._keep_reason(info)
            if reason is not None:
                if info.path not in self._kept_warned:
                    self._kept_warned.add(info.path)
                    logger.warning("keeping checkpoint %s although a save would prune it: it "
                                   "could not be read (%s)", info.path, reason)
                continue
            if step > saved_step:
                logger.warning("removing checkpoint %s: newer than the just-saved step %d "
                               "(abandoned timeline)", info.path, saved_step)
            # Rename first so the checkpoint disappears atomically, then delete at leisure.
            grave = self.root / f".del-{_tag(info.step)}"
            try:
                os.rename(info.path, grave)
            except OSError as exc:
                logger.warning("cannot remove old checkpoint %s: %s", info.path, exc)
                continue
            _rmtree_quiet(grave)

    def _keep_reason(self, info: CheckpointInfo) -> str | None:
        """None when a save may remove `info` (this process wrote or verified it, or it
        validates now), else why it could not be read."""
        verdict = self.ledger.verdict(info.path)
        if verdict is UNKNOWN:
            return self.validate(info)
        return verdict if isinstance(verdict, str) else None

    def _clean_leftovers(self) -> None:
        """Remove stale ``.tmp-``/``.del-`` dirs; restore a stale ``.old-`` dir with no final."""
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return
        now = time.time()
        for entry in entries:
            match = _LEFTOVER_RE.fullmatch(entry.name)
            if not match or not entry.is_dir(follow_symlinks=False):
                continue
            kind, final_name, pid = match.group(1), match.group(2), int(match.group(3))
            try:
                age = now - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age < STALE_AFTER_S and _pid_alive(pid):
                continue  # possibly a save in progress in another process
            path = Path(entry.path)
            final = self.root / final_name
            if kind == "old" and not final.exists():
                try:
                    os.rename(path, final)
                    logger.warning("restored checkpoint %s from interrupted re-save", final)
                    continue
                except OSError as exc:
                    logger.warning("cannot restore %s to %s: %s", path, final, exc)
                    continue
            logger.info("removing leftover checkpoint dir %s", path)
            _rmtree_quiet(path)

    # ---- reading -------------------------------------------------------------------------

    def list(self) -> builtins.list[CheckpointInfo]:
        """Checkpoint directories sorted by step, newest last; hashes are not checked."""
        try:
            entries = builtins.list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CheckpointError(
                f"cannot list checkpoints in {self.root}: {exc.strerror or exc}"
            ) from exc
        finals: dict[int, Path] = {}
        interrupted: dict[int, Path] = {}
        for entry in entries:
            if not entry.is_dir():
                continue
            step = parse_step_dirname(entry.name)
            if step is not None:
                finals[step] = Path(entry.path)
                continue
            match = _LEFTOVER_RE.fullmatch(entry.name)
            if match and match.group(1) == "old":
                old_step = parse_step_dirname(match.group(2))
                if old_step is not None:
                    interrupted[old_step] = Path(entry.path)
        for step, path in interrupted.items():
            finals.setdefault(step, path)  # a re-save died between its two renames
        return [self._info(step, finals[step]) for step in sorted(finals)]

    @staticmethod
    def _info(step: int, path: Path) -> CheckpointInfo:
        try:
            manifest = read_manifest(path)
            return CheckpointInfo(step, path, manifest.created, tuple(sorted(manifest.files)))
        except CheckpointError:
            pass
        try:
            created = path.stat().st_mtime
            names = sorted(
                e.name for e in os.scandir(path) if e.is_file() and e.name != MANIFEST_NAME
            )
        except OSError:
            created, names = 0.0, []
        return CheckpointInfo(step, path, created, tuple(names))

    def validate(self, info: CheckpointInfo) -> str | None:
        """None when the checkpoint is complete and intact, else the reason it is not (the
        verdict goes to `ledger`)."""
        reason = self._validate(info)
        self.ledger.note(info.path, reason)
        return reason

    @staticmethod
    def _validate(info: CheckpointInfo) -> str | None:
        try:
            manifest = read_manifest(info.path)
        except CheckpointError as exc:
            return str(exc)
        if manifest.step != info.step:
            return f"step mismatch: manifest says {manifest.step}"
        return validate_manifest(info.path, manifest)

    def iter_newest(
        self, max_step: int | None = None, *, validate: bool = True
    ) -> Iterator[tuple[CheckpointInfo, str | None]]:
        """Every checkpoint newest first with None (valid) or the reason to skip it.

        Validation is lazy: a caller that stops at the first valid one hashes nothing older.
        ``validate=False`` only checks the step bound, for loaders that verify every byte
        they read themselves (the tensor `Checkpointer`).
        """
        for info in reversed(self.list()):
            if max_step is not None and info.step > max_step:
                yield info, f"above max_step {max_step}"
            else:
                yield info, self.validate(info) if validate else None

    def latest_valid(
        self, max_step: int | None = None
    ) -> tuple[CheckpointInfo | None, tuple[SkippedCheckpoint, ...]]:
        """The newest valid checkpoint with step <= `max_step`, and the newer ones passed over."""
        skipped: builtins.list[SkippedCheckpoint] = []
        for info, reason in self.iter_newest(max_step):
            if reason is None:
                return info, tuple(skipped)
            logger.warning("skipping checkpoint %s: %s", info.path, reason)
            skipped.append(SkippedCheckpoint(info.step, info.path, reason))
        return None, tuple(skipped)
