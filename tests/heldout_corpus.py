"""What the structure tests of the held-out real-world corpora share: label fields, the text
that proves nothing when shared (generic lines), and the overlap checks between corpora."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from trainguard.taxonomy import SUPERVISOR_CATEGORIES, Category

DATA = Path(__file__).resolve().parent / "data"

FIELDS = {"file", "category", "action", "xids", "source", "diagnosis"}
MAX_LINES = 60
# Lines this short, or made only of punctuation, are too common to show that text was copied.
MIN_SHARED_CHARS = 20
# Fixed text that PyTorch prints after every CUDA error, and the nvidia-smi table header:
# sharing it shows no copying.
GENERIC_LINES = {
    "Traceback (most recent call last):",
    "CUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.",
    "CUDA kernel errors might be asynchronously reported at some other API call,"
    "so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |",
}
LOG_CATEGORIES = {c.value for c in set(Category) - SUPERVISOR_CATEGORIES - {Category.UNKNOWN}}
"""The supervisor's own diagnoses (a hung job, an injected fault) are never a log line's."""
NVRM_XID = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")


def labels(corpus: Path) -> list[dict[str, object]]:
    lines = (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def norm_source(url: object) -> str:
    return str(url).strip().split("#")[0].rstrip("/").lower()


def nontrivial(line: str) -> bool:
    text = line.strip()
    return (len(text) >= MIN_SHARED_CHARS and text not in GENERIC_LINES
            and any(ch.isalnum() for ch in text))


def consecutive_pairs(text: str) -> set[tuple[str, str]]:
    """Pairs of adjacent non-blank lines, both non-trivial, whitespace-stripped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return {(a, b) for a, b in itertools.pairwise(lines)
            if nontrivial(a) and nontrivial(b)}


def normalised(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())
