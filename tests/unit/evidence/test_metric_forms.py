"""A non-finite loss under any metric name: training scripts and frameworks print named losses
(``total_loss``, ``val_loss``, ``giou_loss``) next to the plain ``loss``. Hand-written lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, load_rules, scan_paths


def signatures(tmp_path: Path, line: str) -> list[str]:
    path = tmp_path / "train.log"
    path.write_text(f"{line}\n", encoding="utf-8")
    events, _ = scan_paths([str(path)], load_rules(), ScanOptions(suspicious_lines=True))
    return [e.signature for e in events]


@pytest.mark.parametrize("line", [
    "STEP 1210  lr: 0.000400  box_loss:  nan  cls_loss: 1.92  total_loss:  nan",
    "Epoch 3/20 - 41s - acc: 0.4122 - val_loss: nan",
    "step=88 train_loss=inf grad_norm=12.5",
])
def test_a_named_loss_that_is_not_finite_is_numerical(tmp_path: Path, line: str) -> None:
    assert signatures(tmp_path, line) == ["nan_loss"]


@pytest.mark.parametrize("line", [
    "STEP 1210  lr: 0.000400  box_loss: 0.31  cls_loss: 1.92  total_loss: 2.23",
    "iteration 40 | loss_scale: 65536.0 | found inf_count: 0",
])
def test_finite_named_losses_are_no_failure(tmp_path: Path, line: str) -> None:
    assert "nan_loss" not in signatures(tmp_path, line)
