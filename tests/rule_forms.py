"""What the documented-form tests share (tests/unit/evidence/test_documented_*forms.py): one line
claimed (or not) by a named rule, the pair of parametrized tests over a module's lists of such
lines, and a few lines written to a log file and scanned as `logs classify` does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

import pytest

from trainguard.evidence import (
    FailureEvent,
    Incident,
    ScanOptions,
    correlate,
    load_rules,
    scan_paths,
)
from trainguard.evidence.rules import RuleSet
from trainguard.taxonomy import Action, Category

shipped_rules: Callable[[], RuleSet] = cache(load_rules)
"""The shipped rules, compiled once for the whole test run (they never change during it)."""


def assert_claimed(line: str, rule_id: str, category: str, action: str) -> None:
    """The first rule that matches `line` is `rule_id`, with this category and action."""
    m = shipped_rules().match(line)
    assert m is not None, "no rule"
    assert m.rule.id == rule_id
    assert m.rule.category.value == category
    assert m.rule.action.value == action


def assert_not_claimed(line: str, rule_id: str) -> None:
    """`rule_id` does not claim `line` (another rule may)."""
    m = shipped_rules().match(line)
    assert m is None or m.rule.id != rule_id


FormTest = Callable[..., None]


def form_tests(documented: Sequence[tuple[str, str, str, str]],
               not_claimed: Sequence[tuple[str, str]]) -> tuple[FormTest, FormTest]:
    """A module's two tests: each (line, rule id, category, action) of ``documented`` is claimed
    by its rule, and each (line, rule id) of ``not_claimed`` is not. Bind them to module names
    starting with ``test_`` so pytest collects them."""

    @pytest.mark.parametrize(("line", "rule_id", "category", "action"), documented)
    def test_documented_line_is_claimed(line: str, rule_id: str, category: str,
                                        action: str) -> None:
        assert_claimed(line, rule_id, category, action)

    @pytest.mark.parametrize(("line", "rule_id"), not_claimed)
    def test_look_alike_is_not_claimed(line: str, rule_id: str) -> None:
        assert_not_claimed(line, rule_id)

    return test_documented_line_is_claimed, test_look_alike_is_not_claimed


def scan_lines(tmp_path: Path, lines: list[str], *, suspicious: bool = False
               ) -> tuple[list[FailureEvent], list[Incident]]:
    """The events and incidents of `lines` written to a log file and scanned."""
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    rules = shipped_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=suspicious))
    return events, correlate(events, rules)


def first_answer(tmp_path: Path, lines: list[str]) -> tuple[Category, Action, str]:
    """What `logs classify` answers first for `lines` (lines with failure words read too): the
    first incident's category, action and root signature, or (unknown, none, "") if none."""
    _, incidents = scan_lines(tmp_path, lines, suspicious=True)
    if not incidents:
        return Category.UNKNOWN, Action.NONE, ""
    return incidents[0].category, incidents[0].action, incidents[0].root_cause.signature
