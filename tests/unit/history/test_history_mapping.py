"""The mapping file: source types onto the taxonomy; bad files name the file, rule and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.errors import HistoryError
from trainguard.history.mapping import TAXONOMY, TypeMapping, load_mapping, parse_mapping

FIXTURES = Path(__file__).parent / "fixtures"


def test_first_matching_rule_wins_and_case_is_ignored() -> None:
    mapping = load_mapping(FIXTURES / "infinitehbd_map.toml")
    assert mapping.rules[0] == ("Hardware Failure / GPU / GPU DBE*", "memory-ecc")
    assert mapping.category_for("Hardware Failure / GPU / GPU DBE(Double Bit ECC) > Threshold") \
        == "memory-ecc"
    assert mapping.category_for("HARDWARE FAILURE / GPU / GPU xid Error") == "gpu"
    assert mapping.category_for("Hardware Failure / Network / Link Down") == "network"
    assert mapping.category_for("Software Failure / Software Tool / Kubelet Date Absent") \
        == "software"
    assert mapping.category_for("Other Failure / Stress Test Failure / Unknown Error") is None


def test_patterns_match_the_whole_kind_with_shell_wildcards() -> None:
    mapping = TypeMapping((("GPU ?", "gpu"), ("[[]x] *", "unknown")))
    assert mapping.category_for("GPU 1") == "gpu"
    assert mapping.category_for("GPU 12") is None
    assert mapping.category_for("my GPU 1") is None
    assert mapping.category_for("[x] odd") == "unknown"


def _bad(text: str, tmp_path: Path) -> str:
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(HistoryError) as info:
        load_mapping(path)
    return str(info.value)


def test_a_category_outside_the_taxonomy_names_the_file_rule_and_line(tmp_path: Path) -> None:
    text = ('# comment\n[[map]]\npattern = "a*"\ncategory = "gpu"\n\n'
            '[[map]]\npattern = "b*"\ncategory = "gpu-ecc"\n')
    message = _bad(text, tmp_path)
    assert message == (f"{tmp_path / 'm.toml'}: rule 2 (line 6): category 'gpu-ecc' is not one "
                       "of " + ", ".join(TAXONOMY))


@pytest.mark.parametrize(("text", "expected"), [
    ('[[map]]\ncategory = "gpu"\n', "rule 1 (line 1): needs a pattern"),
    ('[[map]]\npattern = "a"\ncategory = "gpu"\nnote = "x"\n',
     "rule 1 (line 1): unknown key 'note'"),
    ('[[map]]\npattern = "a"\n', "rule 1 (line 1): category None is not one of"),
    ('[[map]]\npattern = "a"\ncategory = 3\n', "category 3 is not one of"),
    ('[rules]\nx = 1\n', "unknown key 'rules'"),
    ('', "no [[map]] rules"),
    ('[[map]\npattern = "a"\n', "is not valid TOML"),
    ('map = [{pattern = "a", category = "nope"}]\n', "rule 1: category 'nope'"),
])
def test_bad_mapping_files_are_history_errors(text: str, expected: str, tmp_path: Path) -> None:
    message = _bad(text, tmp_path)
    assert message.startswith(str(tmp_path / "m.toml"))
    assert expected in message


def test_an_unreadable_mapping_file_is_a_history_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=r"cannot read mapping file .*missing\.toml"):
        load_mapping(tmp_path / "missing.toml")


def test_parse_mapping_and_a_direct_bad_category() -> None:
    assert parse_mapping('[[map]]\npattern = "*"\ncategory = "unknown"\n', "x").rules == (
        ("*", "unknown"),)
    with pytest.raises(HistoryError, match="mapping rule 1: category 'GPU'"):
        TypeMapping((("*", "GPU"),))
