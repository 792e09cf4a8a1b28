"""What the documented-form tests share (tests/unit/evidence/test_documented_forms.py and
test_documented_infra_forms.py): one line claimed (or not) by a named rule, and a few lines
written to a log file and scanned as `logs classify` does."""

from __future__ import annotations

from pathlib import Path

from trainguard.evidence import (
    FailureEvent,
    Incident,
    ScanOptions,
    correlate,
    load_rules,
    scan_paths,
)


def assert_claimed(line: str, rule_id: str, category: str, action: str) -> None:
    """The first rule that matches `line` is `rule_id`, with this category and action."""
    m = load_rules().match(line)
    assert m is not None, "no rule"
    assert m.rule.id == rule_id
    assert m.rule.category.value == category
    assert m.rule.action.value == action


def assert_not_claimed(line: str, rule_id: str) -> None:
    """`rule_id` does not claim `line` (another rule may)."""
    m = load_rules().match(line)
    assert m is None or m.rule.id != rule_id


def scan_lines(tmp_path: Path, lines: list[str], *, suspicious: bool = False
               ) -> tuple[list[FailureEvent], list[Incident]]:
    """The events and incidents of `lines` written to a log file and scanned."""
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=suspicious))
    return events, correlate(events, rules)
