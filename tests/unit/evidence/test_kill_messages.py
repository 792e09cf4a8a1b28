"""Process kills reported by shells and Slurm point at host memory."""

from __future__ import annotations

import pytest

from trainguard.evidence import load_rules
from trainguard.taxonomy import Category


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("run.sh: line 12: 48211 Killed                  python train.py --cfg big.yaml",
         "process_killed_sigkill"),
        ("slurmstepd: error: Job 4711 exceeded memory limit (512000000 > 491520000), being "
         "killed", "host_oom_killer"),
    ],
)
def test_kill_messages_are_host_oom(line: str, signature: str) -> None:
    m = load_rules().match(line)
    assert m is not None
    assert m.rule.id == signature
    assert m.rule.category is Category.OOM_HOST
