"""Rules are RE2 patterns: non-RE2 operator rules are refused clearly, and input is bounded.

Requirement (issue #16): every rule pattern is compiled with RE2 (linear time); an operator rule
file using lookarounds or backreferences is a ConfigError that says so, without RE2's own
"Error parsing" noise on stderr; a rule sees at most MAX_LINE_CHARS of a line and MAX_BLOCK_CHARS
of a multi-line block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.errors import ConfigError
from trainguard.evidence import load_rules
from trainguard.evidence.rules import MAX_BLOCK_CHARS, MAX_LINE_CHARS, RuleSet, parse_rules_toml

RULE = """
[[rule]]
id = "my_rule"
category = "user_code_error"
keywords = ['{keyword}']
pattern = '{pattern}'
"""


@pytest.mark.parametrize(("keyword", "pattern", "match"), [
    ("boom", "boom(?! ok)", "RE2 does not support"),
    ("boom", "(?<=x)boom", "RE2 does not support"),
    ("boom", "(boom) \\1", "RE2 does not support"),
    ("boom", "boom\\Z", "RE2 does not support"),
    ("bo(?=om)", "boom", "keywords uses regex syntax RE2 does not support"),
    ("boom", "boom(", "pattern is not a valid regex"),
])
def test_operator_rule_that_re2_cannot_run_is_a_config_error(
        keyword: str, pattern: str, match: str, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(RULE.format(keyword=keyword, pattern=pattern))
    with pytest.raises(ConfigError, match=match) as info:
        load_rules([path])
    assert str(path) in str(info.value) and "my_rule" in str(info.value)
    assert capfd.readouterr().err == ""  # RE2's own logging is silenced


def test_every_builtin_pattern_is_compiled_with_re2() -> None:
    for rule in load_rules().rules:
        assert type(rule.pattern).__module__ == "re2", rule.id
        assert type(rule.keyword_rx).__module__ == "re2", rule.id


def test_ignore_case_and_named_groups_work_with_re2() -> None:
    (rule,) = parse_rules_toml(RULE.format(keyword="boom", pattern="boom at (?P<rank>\\d+)")
                               + "ignore_case = true\n", "x.toml")
    m = RuleSet([rule]).match("BOOM AT 7 ✓ ünïcode")
    assert m is not None and m.groups == {"rank": "7"} and m.span_text == "BOOM AT 7"


def test_a_rule_sees_a_bounded_line() -> None:
    rules = load_rules()
    head = "x" * (MAX_LINE_CHARS - 100)
    assert rules.match(head + " CUDA out of memory") is not None
    assert rules.match(head + " " * 200 + "CUDA out of memory") is None


def test_a_multi_line_rule_sees_a_bounded_block() -> None:
    rules = load_rules()
    header = "Root Cause (first observed failure):"
    body = ["  time      : 2024-05-01_10:00:00", "  host      : node17",
            "  rank      : 13 (local_rank: 5)", "  exitcode  : 1 (pid: 48211)"]
    m = rules.match(header, body)
    assert m is not None and m.rule.id == "elastic_child_failed"
    assert m.groups["exit_code"] == "1"
    filler = ["." * (MAX_LINE_CHARS - 1)] * (MAX_BLOCK_CHARS // MAX_LINE_CHARS)
    m = rules.match(header, [*body[:3], *filler, body[3]])
    assert m is None or m.rule.id != "elastic_child_failed"


def test_checkpoint_unpickle_without_lookahead() -> None:
    rules = load_rules()
    for line, rule_id in [
        ("_pickle.UnpicklingError: invalid load key, 'v'.", "checkpoint_unpickle"),
        ("_pickle.UnpicklingError: pickle data was truncated", "checkpoint_unpickle"),
        ("_pickle.UnpicklingError: Weights only load failed. This file can still be loaded",
         "weights_only_load"),
    ]:
        m = rules.match(line)
        assert m is not None and m.rule.id == rule_id, line
