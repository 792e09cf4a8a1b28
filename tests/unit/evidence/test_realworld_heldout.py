"""Structure of the held-out real-world corpus (tests/data/realworld_heldout/).

The held-out corpus is a second set of real log excerpts, collected by a different route than
tests/data/realworld/ and labelled from each thread's diagnosis (see its README). It exists to
give an honest, untuned accuracy figure, so these tests check only its structure and its
independence from the development corpus. They deliberately do not run the classifier: the
figure is measured once, by hand, and no rule may be tuned against these cases.
"""

from __future__ import annotations

import pytest
from heldout_corpus import (
    DATA,
    FIELDS,
    MAX_LINES,
    NVRM_XID,
    consecutive_pairs,
    labels,
    norm_source,
)

from trainguard.taxonomy import SUPERVISOR_CATEGORIES, Action, Category

HELDOUT = DATA / "realworld_heldout"
DEV = DATA / "realworld"
MIN_CASES = 112  # the collection's size when it was frozen; see the README
MIN_LINES = 3


LABELS = labels(HELDOUT)


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
    sources = [norm_source(lab["source"]) for lab in LABELS]
    assert len(sources) == len(set(sources))


def test_no_source_shared_with_the_development_corpus() -> None:
    dev = {norm_source(lab["source"]) for lab in labels(DEV)}
    shared = sorted({norm_source(lab["source"]) for lab in LABELS} & dev)
    assert not shared, f"sources also in tests/data/realworld: {shared}"


def test_no_excerpt_text_shared_with_the_development_corpus() -> None:
    dev_pairs: dict[tuple[str, str], str] = {}
    for path in sorted((DEV / "cases").glob("*.log")):
        for pair in consecutive_pairs(path.read_text(encoding="utf-8")):
            dev_pairs.setdefault(pair, path.name)
    overlaps = []
    for lab in LABELS:
        text = (HELDOUT / str(lab["file"])).read_text(encoding="utf-8")
        overlaps += [f"{lab['file']} ~ {dev_pairs[pair]}: {pair[0][:60]!r}"
                     for pair in consecutive_pairs(text) if pair in dev_pairs]
    assert not overlaps, "\n".join(overlaps)


def test_overlap_check_detects_copied_lines() -> None:
    copied = "a line that is long enough to count\nanother line long enough to count\n"
    assert consecutive_pairs(copied) == {("a line that is long enough to count",
                                           "another line long enough to count")}
    assert not consecutive_pairs("short\nlines\n...\n")
