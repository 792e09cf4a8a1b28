"""Structure of the third held-out real-world corpus (tests/data/realworld_heldout3/).

A fresh set of real log excerpts, collected for issue #30 by a route the two earlier corpora did
not use (see its README) and labelled from each source's own diagnosis before any classifier saw
it. It exists to give an honest, untuned accuracy figure, so these tests check only its structure
and its independence from tests/data/realworld/ and tests/data/realworld_heldout/. They
deliberately do not run the classifier: the figure is measured once, by hand, and no rule may be
tuned against these cases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from heldout_corpus import (
    DATA,
    FIELDS,
    MAX_LINES,
    NVRM_XID,
    consecutive_pairs,
    labels,
    norm_source,
    normalised,
)

from trainguard.taxonomy import SUPERVISOR_CATEGORIES, Action, Category

HELDOUT3 = DATA / "realworld_heldout3"
EARLIER = (DATA / "realworld", DATA / "realworld_heldout")
MIN_CASES = 41  # the collection's size when it was frozen (see the README); never lower it
MIN_CATEGORIES = 12  # distinct log categories covered (the README lists which are thin)
MIN_LINES = 1

LABELS = labels(HELDOUT3)


def test_layout_exists() -> None:
    assert (HELDOUT3 / "README.md").is_file()
    assert (HELDOUT3 / "labels.jsonl").is_file()
    assert (HELDOUT3 / "cases").is_dir()


def test_corpus_is_substantial_and_varied() -> None:
    assert len(LABELS) >= MIN_CASES
    used = {str(lab["category"]) for lab in LABELS}
    assert len(used) >= MIN_CATEGORIES, sorted(used)


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
    path = HELDOUT3 / str(lab["file"])
    assert path.is_file(), f"{lab['file']} is labelled but missing"
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert MIN_LINES <= n_lines <= MAX_LINES, f"{lab['file']}: {n_lines} lines"


@pytest.mark.parametrize("lab", LABELS, ids=lambda lab: str(lab["file"]))
def test_xids_match_the_nvrm_lines_in_the_excerpt(lab: dict[str, object]) -> None:
    text = (HELDOUT3 / str(lab["file"])).read_text(encoding="utf-8")
    xids = lab["xids"]
    assert isinstance(xids, list)
    assert set(xids) == {int(x) for x in NVRM_XID.findall(text)}


def test_every_case_file_is_labelled_exactly_once() -> None:
    labelled = [str(lab["file"]) for lab in LABELS]
    assert len(labelled) == len(set(labelled)), "a case is labelled twice"
    on_disk = sorted(f"cases/{p.name}" for p in (HELDOUT3 / "cases").glob("*.log"))
    assert sorted(labelled) == on_disk


def test_one_case_per_source() -> None:
    sources = [norm_source(lab["source"]) for lab in LABELS]
    assert len(sources) == len(set(sources))


@pytest.mark.parametrize("earlier", EARLIER, ids=lambda p: p.name)
def test_no_source_shared_with_an_earlier_corpus(earlier: Path) -> None:
    seen = {norm_source(lab["source"]) for lab in labels(earlier)}
    shared = sorted({norm_source(lab["source"]) for lab in LABELS} & seen)
    assert not shared, f"sources also in {earlier.name}: {shared}"


@pytest.mark.parametrize("earlier", EARLIER, ids=lambda p: p.name)
def test_no_excerpt_text_shared_with_an_earlier_corpus(earlier: Path) -> None:
    seen: dict[tuple[str, str], str] = {}
    for path in sorted((earlier / "cases").glob("*.log")):
        for pair in consecutive_pairs(path.read_text(encoding="utf-8")):
            seen.setdefault(pair, path.name)
    overlaps = []
    for lab in LABELS:
        text = (HELDOUT3 / str(lab["file"])).read_text(encoding="utf-8")
        overlaps += [f"{lab['file']} ~ {earlier.name}/{seen[pair]}: {pair[0][:60]!r}"
                     for pair in consecutive_pairs(text) if pair in seen]
    assert not overlaps, "\n".join(overlaps)


def test_no_excerpt_is_contained_in_an_earlier_case() -> None:
    # Short excerpts have few or no line pairs, so also refuse an excerpt whose whole text
    # already appears, verbatim, inside a case of an earlier corpus: the classifier would see
    # the same input twice.
    earlier = [(f"{corpus.name}/{path.name}", normalised(path.read_text(encoding="utf-8")))
               for corpus in EARLIER for path in sorted((corpus / "cases").glob("*.log"))]
    contained = []
    for lab in LABELS:
        text = normalised((HELDOUT3 / str(lab["file"])).read_text(encoding="utf-8"))
        contained += [f"{lab['file']} is inside {name}" for name, other in earlier if text in other]
    assert not contained, "\n".join(contained)


def test_overlap_check_detects_copied_lines() -> None:
    copied = "a line that is long enough to count\nanother line long enough to count\n"
    assert consecutive_pairs(copied) == {("a line that is long enough to count",
                                           "another line long enough to count")}
    assert not consecutive_pairs("short\nlines\n...\n")
    assert normalised("  a\n\n b \n") == "a\nb"
