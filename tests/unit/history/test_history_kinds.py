"""A fault's kind from its type fields: strings, nested objects, several columns, labels."""

from __future__ import annotations

import pytest

from trainguard.history.kinds import kind_of, top_level


def test_nested_type_object_joins_its_values_in_key_order() -> None:
    record = {"fault_type": {"Level": "Other Failure", "Class": "Stress Test Failure",
                             "Desc": "Unknown Error"}}
    assert kind_of(record, ("fault_type",)) == "Other Failure / Stress Test Failure / Unknown Error"
    reordered = {"fault_type": {"Desc": "d", "Level": "l"}}
    assert kind_of(reordered, ("fault_type",)) == "d / l"


def test_upstream_spellings_are_kept_and_empty_levels_left_out() -> None:
    record = {"t": {"Level": " Hardware Failure ", "Class": "", "Desc": "GPU device unknow error",
                    "Extra": None}}
    assert kind_of(record, ("t",)) == "Hardware Failure / GPU device unknow error"


def test_several_columns_are_levels_in_the_order_given() -> None:
    record = {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU xid Error", "x": "no"}
    assert kind_of(record, ("Level", "Class", "Desc")) == "Hardware Failure / GPU / GPU xid Error"
    assert kind_of(record, ("Desc", "Level")) == "GPU xid Error / Hardware Failure"


def test_a_list_and_a_number_are_levels_too() -> None:
    assert kind_of({"t": ["GPU", 79]}, ("t",)) == "GPU / 79"


@pytest.mark.parametrize("record", [{}, {"t": ""}, {"t": None}, {"t": {"a": ""}}, {"t": False}])
def test_no_type_is_none(record: dict[str, object]) -> None:
    assert kind_of(record, ("t",)) is None


@pytest.mark.parametrize(("record", "kind"), [
    ({"Hardware": "Memory Dimm", "Software": ""}, "Hardware / Memory Dimm"),
    ({"Hardware": "", "Software": "X"}, "Software"),
    ({"Hardware": "", "Software": "yes"}, "Software"),
    ({"Hardware": True, "Software": False}, "Hardware"),
    ({"Hardware": "hardware", "Software": ""}, "Hardware"),
    ({"Hardware": "CPU", "Software": "OS"}, "Hardware / CPU / Software / OS"),
])
def test_labels_put_the_column_name_before_its_value(record: dict[str, object],
                                                     kind: str) -> None:
    assert kind_of(record, ("Hardware", "Software"), labels=True) == kind


@pytest.mark.parametrize(("kind", "top"), [
    ("Hardware Failure / GPU / GPU xid Error", "Hardware Failure"),
    ("TCP/IP error", "TCP/IP error"),
    ("nvlink", "nvlink"),
])
def test_top_level(kind: str, top: str) -> None:
    assert top_level(kind) == top
