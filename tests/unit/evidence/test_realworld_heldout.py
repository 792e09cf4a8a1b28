"""Structure of the held-out real-world corpus (tests/data/realworld_heldout/).

The held-out corpus is a second set of real log excerpts, collected by a different route than
tests/data/realworld/ and labelled from each thread's diagnosis (see its README). It exists to
give an honest, untuned accuracy figure, so these tests check only its structure and its
independence from the development corpus. They deliberately do not run the classifier: the
figure is measured once, by hand, and no rule may be tuned against these cases.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from trainguard.taxonomy import SUPERVISOR_CATEGORIES, Action, Category

DATA = Path(__file__).resolve().parents[2] / "data"
HELDOUT = DATA / "realworld_heldout"
DEV = DATA / "realworld"
FIELDS = {"file", "category", "action", "xids", "source", "diagnosis"}
MIN_CASES = 112  # the collection's size when it was frozen; see the README
MAX_LINES = 60
MIN_LINES = 3
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
    # The fixed column header of every `nvidia-smi` table.
    "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |",
}
NVRM_XID = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")


def _labels(corpus: Path) -> list[dict[str, object]]:
    lines = (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _norm_source(url: object) -> str:
    return str(url).strip().split("#")[0].rstrip("/").lower()


def _nontrivial(line: str) -> bool:
    text = line.strip()
    return (len(text) >= MIN_SHARED_CHARS and text not in GENERIC_LINES
            and any(ch.isalnum() for ch in text))


def _consecutive_pairs(text: str) -> set[tuple[str, str]]:
    """Pairs of adjacent non-blank lines, both non-trivial, whitespace-stripped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return {(a, b) for a, b in itertools.pairwise(lines)
            if _nontrivial(a) and _nontrivial(b)}


LABELS = _labels(HELDOUT)


def test_layout_exists() -> None:
    assert (HELDOUT / "README.md").is_file()
    assert (HELDOUT / "labels.jsonl").is_file()
    assert (HELDOUT / "cases").is_dir()


def test_corpus_is_substantial_and_covers_the_taxonomy() -> None:
    assert len(LABELS) >= MIN_CASES
    used = {lab["category"] for lab in LABELS}
    # the supervisor's own diagnoses (a hung job, an injected fault) are never a log line's
    log_categories = set(Category) - SUPERVISOR_CATEGORIES - {Category.UNKNOWN}
    assert used >= {c.value for c in log_categories}


@pytest.mark.parametrize("lab", LABELS, ids=lambda lab: str(lab["file"]))
def test_label_is_well_formed(lab: dict[str, object]) -> None:
    assert set(lab) == FIELDS
    assert lab["category"] in {c.value for c in Category}
    assert lab["category"] not in {c.value for c in SUPERVISOR_CATEGORIES}
    assert lab["category"] != Category.UNKNOWN.value, "held-out cases need a diagnosis"
    assert lab["action"] in {a.value for a in Action}
    assert lab["action"] != Action.NONE.value
    assert str(lab["source"]).startswith(("https://", "http://"))
    assert str(lab["diagnosis"]).strip()
    assert isinstance(lab["xids"], list)
    assert all(isinstance(x, int) for x in lab["xids"])


@pytest.mark.parametrize("lab", LABELS, ids=lambda lab: str(lab["file"]))
def test_case_file_exists_and_is_a_short_excerpt(lab: dict[str, object]) -> None:
    path = HELDOUT / str(lab["file"])
    assert path.is_file(), f"{lab['file']} is labelled but missing"
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert MIN_LINES <= n_lines <= MAX_LINES, f"{lab['file']}: {n_lines} lines"


@pytest.mark.parametrize("lab", LABELS, ids=lambda lab: str(lab["file"]))
def test_xids_match_the_nvrm_lines_in_the_excerpt(lab: dict[str, object]) -> None:
    text = (HELDOUT / str(lab["file"])).read_text(encoding="utf-8")
    xids = lab["xids"]
    assert isinstance(xids, list)
    assert set(xids) == {int(x) for x in NVRM_XID.findall(text)}


def test_every_case_file_is_labelled_exactly_once() -> None:
    labelled = [str(lab["file"]) for lab in LABELS]
    assert len(labelled) == len(set(labelled)), "a case is labelled twice"
    on_disk = sorted(f"cases/{p.name}" for p in (HELDOUT / "cases").glob("*.log"))
    assert sorted(labelled) == on_disk


def test_one_case_per_source_thread() -> None:
    sources = [_norm_source(lab["source"]) for lab in LABELS]
    assert len(sources) == len(set(sources))


def test_no_source_shared_with_the_development_corpus() -> None:
    dev = {_norm_source(lab["source"]) for lab in _labels(DEV)}
    shared = sorted({_norm_source(lab["source"]) for lab in LABELS} & dev)
    assert not shared, f"sources also in tests/data/realworld: {shared}"


def test_no_excerpt_text_shared_with_the_development_corpus() -> None:
    dev_pairs: dict[tuple[str, str], str] = {}
    for path in sorted((DEV / "cases").glob("*.log")):
        for pair in _consecutive_pairs(path.read_text(encoding="utf-8")):
            dev_pairs.setdefault(pair, path.name)
    overlaps = []
    for lab in LABELS:
        text = (HELDOUT / str(lab["file"])).read_text(encoding="utf-8")
        overlaps += [f"{lab['file']} ~ {dev_pairs[pair]}: {pair[0][:60]!r}"
                     for pair in _consecutive_pairs(text) if pair in dev_pairs]
    assert not overlaps, "\n".join(overlaps)


def test_overlap_check_detects_copied_lines() -> None:
    copied = "a line that is long enough to count\nanother line long enough to count\n"
    assert _consecutive_pairs(copied) == {("a line that is long enough to count",
                                           "another line long enough to count")}
    assert not _consecutive_pairs("short\nlines\n...\n")
