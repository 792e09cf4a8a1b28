"""Real log forms from public threads (tests/data/fixtures/forms/): each must come out as the
category (and action) its thread diagnosed, or as no incident for a benign form."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths

FORMS = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "forms"
SIGNATURES = FORMS.parent / "signatures"
TABLE = tomllib.loads((FORMS / "forms.toml").read_text(encoding="utf-8"))["form"]
AS_CLI = ScanOptions(suspicious_lines=True)


def test_every_form_file_is_listed_with_a_source() -> None:
    listed = {f["file"] for f in TABLE}
    assert listed == {p.name for p in FORMS.glob("*.log")}
    assert all(str(f["source"]).startswith("https://") for f in TABLE)


@pytest.mark.parametrize("form", TABLE, ids=[f["file"] for f in TABLE])
def test_form_is_classified_as_its_thread_diagnosed(form: dict[str, str]) -> None:
    rules = load_rules()
    events, stats = scan_paths([str(FORMS / form["file"])], rules, AS_CLI)
    # What the rules read (the text model's layer on top is tested in test_textread.py).
    incidents = [i for i in correlate(events, rules, learned=False) if not i.suspicious]

    assert stats.warnings == []
    if form["category"] == "none":
        assert incidents == []
        return
    assert incidents, "no incident"
    assert incidents[0].category.value == form["category"]
    if "action" in form:
        assert incidents[0].action.value == form["action"]


def test_signature_fixture_sources_name_existing_fixtures() -> None:
    sources = tomllib.loads((SIGNATURES / "SOURCES.toml").read_text(encoding="utf-8"))["sources"]
    assert sources
    for sig, url in sources.items():
        assert (SIGNATURES / f"{sig}.log").is_file(), sig
        assert url.startswith("https://github.com/"), sig
