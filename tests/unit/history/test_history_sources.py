"""Records of a history file and their line numbers: JSON array, JSON lines, CSV."""

from __future__ import annotations

import pytest

from trainguard.errors import HistoryError
from trainguard.history.sources import RecordTable, detect_format, read_records


def _lines(table: RecordTable) -> list[tuple[int, dict[str, object]]]:
    return [(r.line, dict(r.values)) for r in table.records]


def test_json_array_gives_the_line_where_each_object_starts() -> None:
    text = ('\n[\n  {"a": 1},\n  {"a": 2,\n   "b": "x\\ny"},   {"a": 3},\n\n'
            '  {\n    "a": 4\n  }\n]\n')
    table = read_records(text, "auto", "t.json")
    assert table.fmt == "json"
    assert _lines(table) == [(3, {"a": 1}), (4, {"a": 2, "b": "x\ny"}), (5, {"a": 3}),
                             (7, {"a": 4})]
    assert table.keys == ("a", "b")
    assert table.read == 4


def test_json_array_items_that_are_not_objects_are_refused_with_their_line() -> None:
    table = read_records('[{"a": 1},\n 5,\n ["x"],\n {"a": 2}]', "json", "t.json")
    assert [r.line for r in table.records] == [1, 4]
    assert [str(r) for r in table.refused] == [
        "line 2: record is a JSON int, not an object",
        "line 3: record is a JSON list, not an object"]
    assert table.read == 4


@pytest.mark.parametrize(("text", "expected"), [
    ('[{"a": 1},\n {"a": 2\n', "is not valid JSON"),
    ('[{"a": 1}\n {"a": 2}]', "expected ',' or ']' at line 2"),
    ('[{"a": 1}]\n[{"a": 2}]', "extra data after the array"),
    ('[{"a": 1},\n {"a": tru}]', "at line 2"),
])
def test_broken_json_is_a_history_error_naming_the_line(text: str, expected: str) -> None:
    with pytest.raises(HistoryError, match=r"t\.json") as info:
        read_records(text, "json", "t.json")
    assert expected in str(info.value)


def test_json_format_on_json_lines_says_to_pass_jsonl() -> None:
    with pytest.raises(HistoryError, match="--format jsonl"):
        read_records('{"a": 1}\n{"a": 2}\n', "json", "t.json")


def test_json_lines_skip_blank_lines_and_refuse_bad_ones() -> None:
    text = '{"a": 1}\n\n{"a": 2\n[1]\n{"a": 3}\n'
    table = read_records(text, "auto", "t.jsonl")
    assert table.fmt == "jsonl"
    assert _lines(table) == [(1, {"a": 1}), (5, {"a": 3})]
    assert [r.line for r in table.refused] == [3, 4]
    assert "not a JSON object" in table.refused[0].reason
    assert table.read == 4


def test_json_lines_with_no_object_at_all_is_a_history_error() -> None:
    with pytest.raises(HistoryError, match=r"is not JSON lines.*line 1"):
        read_records("{oops\n{still not\n", "jsonl", "t.jsonl")


def test_csv_lines_count_quoted_newlines_and_blank_lines() -> None:
    text = 'node,start,note\nn1,1,"two\nlines"\n\nn2,2,plain\nn3,3\n'
    table = read_records(text, "auto", "t.csv")
    assert table.fmt == "csv"
    assert table.keys == ("node", "start", "note")
    assert _lines(table) == [(2, {"node": "n1", "start": "1", "note": "two\nlines"}),
                             (5, {"node": "n2", "start": "2", "note": "plain"})]
    assert [str(r) for r in table.refused] == [
        "line 6: has 2 values, the header (line 1) names 3 fields"]


@pytest.mark.parametrize("sep", ["\t", ";", "|"])
def test_csv_delimiter_is_the_one_the_header_uses(sep: str) -> None:
    text = sep.join(["node", "start time", "end"]) + "\n" + sep.join(["n1", "a, b", "2"]) + "\n"
    table = read_records(text, "csv", "t.csv")
    assert _lines(table) == [(2, {"node": "n1", "start time": "a, b", "end": "2"})]


def test_csv_header_with_a_repeated_name_is_a_history_error() -> None:
    with pytest.raises(HistoryError, match="repeated field name"):
        read_records("node,node\n1,2\n", "csv", "t.csv")


def test_byte_order_mark_is_ignored() -> None:
    table = read_records('\ufeffnode,start\nn1,5\n', "auto", "t.csv")
    assert table.keys == ("node", "start")


@pytest.mark.parametrize(("text", "fmt"), [("[]", "json"), ('  {"a":1}', "jsonl"),
                                           ("a,b\n", "csv"), ("a\tb\n", "csv")])
def test_detect_format(text: str, fmt: str) -> None:
    assert detect_format(text, "x") == fmt


def test_undetectable_or_empty_or_unknown_format_is_a_history_error() -> None:
    with pytest.raises(HistoryError, match=r"cannot tell its format.*--format"):
        read_records("just words\n", "auto", "t.txt")
    with pytest.raises(HistoryError, match=r"t\.txt is empty"):
        read_records("  \n", "auto", "t.txt")
    with pytest.raises(HistoryError, match=r"unknown format 'xml'.*auto, json, jsonl or csv"):
        read_records("[]", "xml", "t.txt")
