"""What one line means in the context of the lines around it.

A rule sees one line; some evidence only means something next to its neighbours:

1. **Checkpoint I/O.** An exception whose innermost frame is a library's checkpoint code
   (``torch/serialization.py``, ``torch/distributed/checkpoint/``, safetensors, orbax, a
   ``save_checkpoint``/``load_state_dict`` in an installed package) is a checkpoint failure, and
   so is a file error (a missing file, a directory, a permission) raised inside
   ``torch.save`` / ``save_checkpoint`` or naming a checkpoint path. A *storage* error (ENOSPC,
   EDQUOT, EIO, a write that failed) stays a storage failure wherever it is raised: the
   checkpoint is what the run lost, the filesystem is why, and the fix is on the storage (free
   space, a failing disk), not in the checkpoint. Root cause over symptom.
2. **A save that stalls.** A collective timeout while this rank is still writing a checkpoint
   (a save started, no "saved" line yet) is the save stalling every rank, not a network hang.
3. **Loss-scale runs.** One fp16 overflow is benign (the scaler skips a step and halves the
   scale); overflow after overflow driving the scale down to small values is numerical trouble.
   :class:`FileContext` counts consecutive reductions per file and turns the run into a
   ``loss_scale_run`` event once it is long and low enough.

Everything here is a pure function of the lines, or a small per-file state machine the scanner
feeds in line order; the patterns are RE2 like the rules (linear time on any line).

    >>> ctx = FileContext()
    >>> ctx.observe(1, "saving checkpoint at iteration 100 to /ckpt", None) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from trainguard.evidence.events import FailureEvent
from trainguard.evidence.rules import Pattern, PatternMatch, compile_re2
from trainguard.taxonomy import Action, Category, Severity

CONTEXT_FIELD = "context"
"""The field that says why the lines around an event changed its reading (:func:`as_checkpoint`)."""
LOSS_SCALE_RUN_SIGNATURE = "loss_scale_run"
LOSS_SCALE_RUN_MIN = 4
"""Consecutive scale reductions (no recovery in between) that make a run numerical trouble..."""
LOSS_SCALE_RUN_MAX_SCALE = 256.0
"""... once the scale has come down to at most this. DeepSpeed's start-up search (2**32 or 2**16
halving down to where the gradients fit, often 2**11-2**16) is a long run too, and benign."""
SAVE_WINDOW_LINES = 2000
"""How many lines after a "saving checkpoint" line a save still counts as in progress."""

_SAVE_START: Pattern = compile_re2(
    r"(?i)\bsaving (?:the )?(?:model )?checkpoint|\bsave_checkpoint\b|\[Torch\] Saving \S+\.pt")
_SAVE_DONE: Pattern = compile_re2(
    r"(?i)successfully saved checkpoint|finished saving the checkpoint|\bcheckpoint saved\b|"
    r"\[Torch\] Saved \S+\.pt|\bsaved checkpoint\b")
_CKPT_CODE: Pattern = compile_re2(
    r"(?i)torch/serialization\.py\S*(?:\", line \d+, in |:\d+ in )_?save\b|"
    r"\b(?:save|load|resume)\w*(?:checkpoint|ckpt)\w*|\btorch\.save\(|\bdcp\.save\b|"
    r"\bsave_pretrained\b|\bsave_file\(|checkpoint_engine\S*\b")
_CKPT_LIBRARY_FRAME: Pattern = compile_re2(
    r"(?i)(?:site|dist)-packages/\S*(?:serialization|checkpoint|ckpt|safetensors|orbax)\S*:\d+ in |"
    r"(?:site|dist)-packages/\S*:\d+ in _?(?:save|load|restore)\w*(?:checkpoint|ckpt|state_dict|"
    r"pretrained|file)\b")
_MODULE_STATE_DICT_FRAME: Pattern = compile_re2(
    r"torch/nn/modules/module\.py:\d+ in _?load(?:_from)?_state_dict\b")
_CKPT_PATH: Pattern = compile_re2(
    r"(?i)checkpoint|\bckpt|global_step\d+|\biter_\d{4,}|\.safetensors\b|\.pth?\b|\.distcp\b")
_FILE_ERRORS = frozenset({"FileNotFoundError", "IsADirectoryError", "NotADirectoryError",
                          "PermissionError", "OSError", "IOError", "EOFError"})
_SCALE_SIGNATURES = frozenset({"fp16_loss_scale_overflow", "loss_scale_collapse"})
_ATTEMPTED: Pattern = compile_re2(r"Attempted loss scale: (?P<v>\d[\d.]*(?:e\+?\d+)?)")
_NEW_SCALE: Pattern = compile_re2(
    r"(?i)(?:reducing (?:the )?(?:dynamic )?(?:loss scale )?(?:from \S+ )?to|"
    r"setting loss scale to:?) (?P<v>\d[\d.]*(?:e\+?\d+)?)")


def checkpoint_io(ev: FailureEvent, frames: Sequence[str] = (), text: str = "") -> FailureEvent:
    """``ev`` as a checkpoint failure when it is a file error during checkpoint I/O.

    ``frames`` are the traceback's frame and source lines, ``text`` the exception line.
    """
    if ev.category is Category.CHECKPOINT:
        return ev
    if ev.signature == "python_exception" and in_checkpoint_library(ev.field_value("last_frame")):
        return as_checkpoint(ev, "raised inside checkpoint save/load code")
    exc = (ev.field_value("exc_type") or "").rsplit(".", 1)[-1]
    if ev.category is not Category.USER_CODE_ERROR or exc not in _FILE_ERRORS:
        return ev  # a storage error stays the root: the checkpoint is its symptom
    in_code = any(_CKPT_CODE.search(f) for f in frames)
    if not in_code and _CKPT_PATH.search(text) is None:
        return ev
    return as_checkpoint(ev, "during checkpoint save/load")


def in_checkpoint_library(frame: str | None) -> bool:
    """``frame`` (``file:line in func``) is inside a library's checkpoint save/load code.

    Not ``torch.nn.Module.load_state_dict`` (``torch/nn/modules/module.py``): it reads no file,
    it checks the state dict's keys and shapes against the model ("Error(s) in loading
    state_dict ... Missing key(s) / size mismatch for ..."), so the model built is not the
    one saved, a program's or a configuration's mistake, not the checkpoint's."""
    return frame is not None and _CKPT_LIBRARY_FRAME.search(frame) is not None \
        and _MODULE_STATE_DICT_FRAME.search(frame) is None


def as_checkpoint(ev: FailureEvent, why: str) -> FailureEvent:
    """``ev`` re-labelled a checkpoint failure; its action (check storage, fix code) stays."""
    return replace(ev, category=Category.CHECKPOINT,
                   summary=f"{ev.summary} ({why})"[:300],
                   fields=(*ev.fields, (CONTEXT_FIELD, why)))


@dataclass(slots=True)
class _ScaleRun:
    length: int = 0
    last: float | None = None


class FileContext:
    """Per-file state the scanner feeds every candidate line to, in line order."""

    def __init__(self) -> None:
        self._saving_since: int | None = None
        self._scale = _ScaleRun()

    def observe(self, line_no: int, text: str, ev: FailureEvent | None) -> FailureEvent | None:
        """``ev`` (the line's own classification, if any) in the context of this file."""
        if _SAVE_DONE.search(text):
            self._saving_since = None
        elif _SAVE_START.search(text):
            self._saving_since = line_no
        if ev is None:
            return None
        if ev.signature in _SCALE_SIGNATURES:
            return self._overflow(text, ev)
        ev = checkpoint_io(ev, (), text)
        saving = self._saving_since is not None and \
            line_no - self._saving_since <= SAVE_WINDOW_LINES
        if saving and ev.category is Category.NCCL_TIMEOUT_HANG:
            stalled = as_checkpoint(ev, "while this rank was still saving a checkpoint")
            return replace(stalled, action=Action.CHECK_STORAGE,
                           confidence=min(stalled.confidence, 0.5))
        return ev

    def _overflow(self, text: str, ev: FailureEvent) -> FailureEvent:
        new = _number(_NEW_SCALE.search(text))
        attempted = _number(_ATTEMPTED.search(text))
        run = self._scale
        if new is None:
            return ev
        recovered = run.last is None or new >= run.last or (
            attempted is not None and attempted > run.last)
        run.length = 1 if recovered else run.length + 1
        run.last = new
        if run.length < LOSS_SCALE_RUN_MIN or new > LOSS_SCALE_RUN_MAX_SCALE:
            return ev
        return replace(
            ev, category=Category.NUMERICAL_NAN, action=Action.FIX_CONFIG,
            severity=Severity.FATAL, signature=LOSS_SCALE_RUN_SIGNATURE, confidence=0.6,
            summary=(f"fp16 loss scale driven down {run.length} overflows in a row to {new:g} "
                     "(gradients overflow step after step: numerical trouble)"),
            fields=(*ev.fields, ("loss_scale", f"{new:g}"), ("run", str(run.length))))


def _number(m: PatternMatch | None) -> float | None:
    if m is None:
        return None
    try:
        return float(m.groupdict()["v"])
    except ValueError:
        return None


__all__ = ["LOSS_SCALE_RUN_MAX_SCALE", "LOSS_SCALE_RUN_MIN", "LOSS_SCALE_RUN_SIGNATURE",
           "SAVE_WINDOW_LINES", "FileContext", "as_checkpoint", "checkpoint_io",
           "in_checkpoint_library"]
