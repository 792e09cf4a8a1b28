"""Every signature rule matches in time linear in its input, whatever the line holds.

Requirement (issue #16): a rule with several ``[^\\n]*`` gaps used to backtrack catastrophically
on long lines built from its own fragments (one 13.8 KB line: 20 s). For EVERY built-in rule
(new rules are covered automatically) we build adversarial lines over 10 KB from the rule's own
keywords and the literal pieces of its pattern (repeated whole, cut short so they fail at the
end, glued with the separators logs use) plus a seeded random mix, and require each
``RuleSet.match`` and the scanner over a file of such lines to stay under 50 ms per line. This is
a guard against exponential/quadratic blow-ups, not a benchmark.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.evidence import load_rules, scan_paths
from trainguard.evidence.rules import Rule, RuleSet

try:  # Python >= 3.11 keeps the parser private
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

LIMIT_S = 0.050
MIN_LINE = 10_500
SEPARATORS = ("", " ", "[Rank 1] ", ":", "(", ", ", ") ", "=", "\t", "/")

# The reviewer's fragments (nccl_watchdog_timeout, elastic_child_failed).
REVIEW_FRAGMENTS = (
    "[Rank 1] ",
    "Work(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000)",
    "Root Cause (first observed failure):",
    "Watchdog caught collective operation timeout: ",
    "ChildFailedError",
)

_CATEGORY_SAMPLE = {
    "CATEGORY_DIGIT": "1", "CATEGORY_NOT_DIGIT": "a", "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "x", "CATEGORY_WORD": "a", "CATEGORY_NOT_WORD": " ",
}


def _sample(parsed: Any, rng: random.Random | None = None) -> str:
    """A string the parsed (sub)pattern matches (lookarounds ignored): its literal skeleton."""
    out: list[str] = []
    for op, av in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(av) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_sample_in(av))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            n = lo if rng is None else rng.randint(lo, min(hi, lo + 3))
            out.extend(_sample(sub, rng) for _ in range(n))
        elif name == "SUBPATTERN":
            out.append(_sample(av[-1], rng))
        elif name == "BRANCH":
            branches = av[1]
            pick = branches[0] if rng is None else rng.choice(branches)
            out.append(_sample(pick, rng))
        elif name == "ATOMIC_GROUP":
            out.append(_sample(av, rng))
        # AT (anchors), ASSERT/ASSERT_NOT (lookarounds), GROUPREF: nothing to emit
    return "".join(out)


def _sample_in(items: Any) -> str:
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            return "a"
        if name == "LITERAL":
            return chr(av)
        if name == "RANGE":
            return chr(av[0])
        if name == "CATEGORY":
            return _CATEGORY_SAMPLE.get(str(av), "a")
    return "a"


def _alternatives(pattern: str) -> list[str]:
    """One sample per top-level alternative of ``pattern``, plus one per nested branch choice."""
    parsed = sre_parse.parse(pattern)
    out = []
    items = list(parsed)
    if len(items) == 1 and str(items[0][0]) == "BRANCH":
        out.extend(_sample(b) for b in items[0][1][1])
    else:
        out.append(_sample(parsed))
    rng = random.Random(pattern)
    out.extend(_sample(parsed, rng) for _ in range(4))
    return [s for s in dict.fromkeys(out) if s]


def _literal_pieces(pattern: str) -> list[str]:
    """The literal runs of a pattern's source (``Timeout(ms)=``, ``ran for `` ...)."""
    plain = re.sub(r"\(\?(?:P<\w+>|[:!=]|<[=!]|[aiLmsux-]+:)", "(", pattern)
    runs = re.findall(r"(?:\\[^dDsSwWbBAZ0-9]|[^\\()\[\]{}|*+?^$.])+", plain)
    return [re.sub(r"\\(.)", r"\1", r) for r in runs if len(r) >= 3]


def _repeat(piece: str, sep: str) -> str:
    unit = piece + sep
    return unit * (MIN_LINE // max(1, len(unit)) + 1)


def _random_line(rng: random.Random, pool: list[str]) -> str:
    """Fragments from ``pool`` joined by random separators until the line is over MIN_LINE."""
    parts: list[str] = []
    size = 0
    while size < MIN_LINE:
        p = rng.choice(pool) + rng.choice(SEPARATORS)
        parts.append(p)
        size += len(p)
    return "".join(parts)


def adversarial_lines(rule: Rule, seed: int = 16) -> Iterator[str]:
    """Lines over 10 KB that make a backtracking engine try every split of the rule's gaps."""
    source = rule.pattern.pattern
    samples = _alternatives(source)
    keywords = [_sample(sre_parse.parse(k)) or k for k in rule.keywords]
    pieces = _literal_pieces(source)
    fragments = [*samples, *keywords, *pieces]
    for frag in fragments:
        for sep in SEPARATORS[:6]:
            yield _repeat(frag, sep)
        if len(frag) > 1:
            # near-misses: the fragment repeated, failing only at its last character
            yield _repeat(frag[:-1], " ")
            yield _repeat(frag, "") + frag[:-1]
    yield _repeat(" ".join(keywords), " ")
    yield _repeat("".join(pieces), " ")
    yield _repeat("".join(samples), "\t")
    # seeded random mix of this rule's fragments, the reviewer's ones and separators
    rng = random.Random(f"{seed}:{rule.id}")
    pool = [*fragments, *REVIEW_FRAGMENTS]
    for _ in range(4):
        yield _random_line(rng, pool)


def reviewer_lines() -> list[str]:
    return [
        _repeat("[Rank 1]", " "),
        _repeat("Work(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000)", " "),
        _repeat("Root Cause (first observed failure):", " "),
        _repeat("[Rank 1] Work(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000)", " "),
        _repeat(" ".join(REVIEW_FRAGMENTS), " "),
    ]


def worst_time(fn: Callable[[str], object], lines: list[str]) -> tuple[float, str]:
    """Slowest call of ``fn`` over ``lines`` (best of three, so a scheduler hiccup on a shared
    machine is ignored; a real blow-up is slow every time)."""
    worst, worst_line = 0.0, ""
    for line in lines:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn(line)
            best = min(best, time.perf_counter() - t0)
            if best < LIMIT_S:
                break
        if best > worst:
            worst, worst_line = best, line
    return worst, worst_line


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    rs = load_rules()
    rs.match("warm-up: CUDA out of memory")  # first use builds RE2's DFA caches
    return rs


def _rule_ids() -> list[str]:
    return [r.id for r in load_rules().rules]


def test_fuzz_covers_every_rule() -> None:
    for rule in load_rules().rules:
        lines = list(adversarial_lines(rule))
        assert len(lines) >= 10, rule.id
        assert all(len(line) > 10_000 for line in lines), rule.id


@pytest.mark.parametrize("rule_id", _rule_ids())
def test_rule_matching_is_fast_on_adversarial_lines(rules: RuleSet, rule_id: str) -> None:
    lines = list(adversarial_lines(rules.by_id[rule_id]))
    worst, line = worst_time(lambda s: rules.match(s, [s] * 3), lines)
    assert worst < LIMIT_S, f"{rule_id}: {worst * 1000:.0f} ms on {line[:120]!r}..."


def test_reviewer_examples_are_fast(rules: RuleSet) -> None:
    worst, line = worst_time(lambda s: rules.match(s, [s] * 200), reviewer_lines())
    assert worst < LIMIT_S, f"{worst * 1000:.0f} ms on {line[:120]!r}..."


def test_randomized_lines_are_fast(rules: RuleSet) -> None:
    """Hypothesis-free: a fixed seed mixes fragments of all rules, so the run is reproducible."""
    rng = random.Random(1616)
    pool = [*REVIEW_FRAGMENTS]
    for rule in rules.rules:
        pool.extend(_literal_pieces(rule.pattern.pattern))
        pool.extend(rule.keywords)
    lines = [_random_line(rng, pool) for _ in range(40)]
    worst, line = worst_time(lambda s: rules.match(s, [s] * 5), lines)
    assert worst < LIMIT_S, f"{worst * 1000:.0f} ms on {line[:120]!r}..."


def test_scanner_over_a_file_of_adversarial_lines(rules: RuleSet, tmp_path: Path) -> None:
    lines = [*reviewer_lines(),
             _repeat("Traceback (most recent call last):", " "),
             _repeat("Root Cause (first observed failure): time : host : rank :", " "),
             _repeat("May  1 10:00:00 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79,", " "),
             _repeat("host1:123:456 [0] NCCL INFO [Rank 1] rank=1", " ")]
    for rule_id in ("nccl_watchdog_timeout", "elastic_child_failed", "nvlink_error",
                    "checkpoint_unpickle", "cuda_oom", "nan_loss"):
        lines.extend(list(adversarial_lines(rules.by_id[rule_id]))[::4])
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(lines) + "\n")
    scan_paths([str(log)], rules)  # warm-up
    per_line = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        _, stats = scan_paths([str(log)], rules)
        per_line = min(per_line, (time.perf_counter() - t0) / len(lines))
    assert stats.lines_read == len(lines)
    assert per_line < LIMIT_S, f"{per_line * 1000:.1f} ms per line"
