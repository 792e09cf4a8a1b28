"""Failure signatures: loading the TOML rule files and matching one line against them.

A :class:`RuleSet` holds the rules in precedence order plus one combined *prefilter* over all of
their keywords. The scanner runs only the prefilter over the bulk of a log (a DFA, hundreds of
MB/s); a rule's full pattern runs only on the few lines the prefilter lets through.

Every pattern (keywords, full rule patterns, the prefilter) is compiled with RE2, never with
Python's backtracking ``re``: RE2 matches in time linear in the text, so no line, however hostile,
can stall the scan, the watch service or the supervisor (issue #16: one 13.8 KB line of repeated
``Work(SeqNum=...`` fragments took ``re`` 20 s). RE2 has no lookarounds or backreferences; an
operator rule that uses them is refused with a :class:`ConfigError`. google-re2 is a hard
dependency: there is no ``re`` fallback (the compiler lives in ``re2util.py``, shared with the
CUDA error catalog, whose code-driven rule :func:`load_rules` places among the shipped ones).
The text any rule sees is also bounded: a line is cut to
:data:`MAX_LINE_CHARS` and a multi-line block to :data:`MAX_BLOCK_CHARS`.

    >>> rules = load_rules()
    >>> m = rules.match("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    >>> m.rule.category.value
    'oom_gpu'
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import re2

from trainguard.errors import ConfigError
from trainguard.evidence.cuda_errors import (
    BASE_READING,
    GENERIC_RULE_ID,
    rule_keywords,
    rule_pattern,
)
from trainguard.evidence.cuda_errors import RULE_ID as CUDA_RULE_ID
from trainguard.evidence.re2util import Pattern, PatternMatch, compile_re2
from trainguard.taxonomy import CATEGORY_PRIORITY, DEFAULT_ACTION, Action, Category, Severity

log = logging.getLogger(__name__)

# Built-in, code-driven signatures (see xid.py); listed so keywords reach the prefilter.
XID_KEYWORDS: tuple[str, ...] = ("NVRM: Xid", "SXid", "fallen off the bus", "NVRM: GPU at PCI",
                                 "The NVIDIA GPU", "Xid=", "XID error")
TRACEBACK_KEYWORD = "Traceback (most recent call last)"
_KNOWN_GROUPS = frozenset({"rank", "host", "gpu_pci", "gpu_index", "xid", "exit_code"})

MAX_LINE_CHARS = 16 << 10
"""A rule sees at most this many characters of a line (and of each following line)."""
MAX_BLOCK_CHARS = 64 << 10
"""A multi-line rule (``lines_after``) sees at most this many characters of its block."""

@dataclass(frozen=True, slots=True)
class Rule:
    """One signature. See the header of ``data/signatures.toml`` for the fields."""

    id: str
    category: Category
    action: Action
    severity: Severity
    confidence: float
    priority: int
    keywords: tuple[str, ...]
    keywords_case: bool
    pattern: Pattern
    keyword_rx: Pattern
    lines_after: int
    summary: str
    source: str


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """A rule that matched, with its named groups (``None`` groups dropped)."""

    rule: Rule
    groups: dict[str, str]
    span_text: str


class _SafeDict(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


def render_summary(template: str, groups: dict[str, str]) -> str:
    try:
        return template.format_map(_SafeDict(groups)).strip()
    except (ValueError, IndexError):
        return template


def _enum(enum: type[Any], value: Any, key: str, where: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise ConfigError(f"{where}: {key} = {value!r} is not one of: {allowed}") from None


def _compile(pattern: str, where: str, key: str, *, ignore_case: bool = False) -> Pattern:
    try:
        return compile_re2(pattern, ignore_case=ignore_case)
    except re2.error as exc:
        try:
            re.compile(pattern)
        except re.error as py_exc:
            raise ConfigError(f"{where}: {key} is not a valid regex: {py_exc}") from exc
        raise ConfigError(
            f"{where}: {key} uses regex syntax RE2 does not support ({exc}); rules are matched "
            "with RE2 so no line can stall the scan: rewrite it without lookarounds, "
            r"backreferences or possessive quantifiers (and \Z as \z)") from exc


def _parse_rule(raw: dict[str, Any], where: str) -> Rule:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each [[rule]] must be a table")
    rid = raw.get("id")
    if not isinstance(rid, str) or not re.fullmatch(r"[a-z0-9_.-]+", rid):
        raise ConfigError(
            f"{where}: rule id must be lowercase letters, digits, _ . - (got {rid!r})")
    where = f"{where}: rule {rid!r}"
    unknown = set(raw) - {"id", "category", "action", "severity", "confidence", "priority",
                          "keywords", "keywords_case", "pattern", "ignore_case", "lines_after",
                          "summary"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if "category" not in raw or "pattern" not in raw:
        raise ConfigError(f"{where}: 'category' and 'pattern' are required")
    category: Category = _enum(Category, raw["category"], "category", where)
    action: Action = _enum(Action, raw.get("action", DEFAULT_ACTION[category].value), "action",
                           where)
    severity: Severity = _enum(Severity, raw.get("severity", "fatal"), "severity", where)
    confidence = raw.get("confidence", 0.8)
    if not isinstance(confidence, int | float) or not 0.0 <= float(confidence) <= 1.0:
        raise ConfigError(f"{where}: confidence must be a number in [0, 1]")
    priority = raw.get("priority", CATEGORY_PRIORITY[category])
    if not isinstance(priority, int):
        raise ConfigError(f"{where}: priority must be an integer")
    keywords = raw.get("keywords")
    if not isinstance(keywords, list) or not keywords or not all(
            isinstance(k, str) and k for k in keywords):
        raise ConfigError(f"{where}: keywords must be a non-empty list of strings "
                          "(they select the lines the pattern is tried on)")
    keywords_case = bool(raw.get("keywords_case", False))
    keyword_rx = _compile("|".join(f"(?:{k})" for k in keywords), where, "keywords",
                          ignore_case=not keywords_case)
    pattern_src = raw["pattern"]
    if not isinstance(pattern_src, str):
        raise ConfigError(f"{where}: pattern must be a string")
    pattern = _compile(pattern_src, where, "pattern", ignore_case=bool(raw.get("ignore_case")))
    lines_after = raw.get("lines_after", 0)
    if not isinstance(lines_after, int) or not 0 <= lines_after <= 200:
        raise ConfigError(f"{where}: lines_after must be an integer in [0, 200]")
    summary = raw.get("summary", rid)
    if not isinstance(summary, str):
        raise ConfigError(f"{where}: summary must be a string")
    return Rule(rid, category, action, severity, float(confidence), priority, tuple(keywords),
                keywords_case, pattern, keyword_rx, lines_after, summary, where.split(":")[0])


def parse_rules_toml(text: str, where: str) -> list[Rule]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from exc
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list):
        raise ConfigError(f"{where}: expected [[rule]] tables")
    rules = [_parse_rule(r, where) for r in raw_rules]
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise ConfigError(f"{where}: duplicate rule id {r.id!r}")
        seen.add(r.id)
    return rules


class RuleSet:
    """Rules in precedence order plus the combined prefilter (all RE2)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.by_id = {r.id: r for r in self.rules}
        ci = [k for r in self.rules if not r.keywords_case for k in r.keywords]
        ci += [re.escape(k) for k in (*XID_KEYWORDS, TRACEBACK_KEYWORD)]
        cs = [k for r in self.rules if r.keywords_case for k in r.keywords]
        parts = [f"(?i:{'|'.join(f'(?:{k})' for k in ci)})"]
        if cs:
            parts.append("|".join(f"(?:{k})" for k in cs))
        self.prefilter_source = "|".join(parts)
        # Lines that may start a multi-line report need their following lines read; each rule
        # keeps its own case sensitivity through a scoped flag.
        multi = [f"(?{'' if r.keywords_case else 'i'}:{r.keyword_rx.pattern})"
                 for r in self.rules if r.lines_after]
        self.multiline_start: Pattern | None = compile_re2("|".join(multi)) if multi else None
        opts = re2.Options()
        opts.max_mem = 256 << 20
        opts.log_errors = False
        self.prefilter: Any = re2.compile(self.prefilter_source.encode(), opts)
        self._prefilter_opts = opts
        self._widened: dict[str, Any] = {}
        self.engine = "re2"
        # One pass over a candidate line tells which rules' keywords occur in it (instead of one
        # search per rule). A Set's DFA never gives up on slow input; the budget is the
        # prefilter's.
        self._keyword_set: Any = re2.Set.SearchSet(opts)
        for r in self.rules:
            self._keyword_set.Add(f"(?{'' if r.keywords_case else 'i'}:{r.keyword_rx.pattern})")
        if self.rules:
            self._keyword_set.Compile()

    def widened_prefilter(self, extra_source: str) -> Any:
        """The prefilter that also lets through lines matching ``extra_source`` (RE2 syntax);
        compiled once per source."""
        compiled = self._widened.get(extra_source)
        if compiled is None:
            source = f"{self.prefilter_source}|(?:{extra_source})"
            compiled = re2.compile(source.encode(), self._prefilter_opts)
            self._widened[extra_source] = compiled
        return compiled

    def match(self, text: str, following: Sequence[str] = (),
              skip: Iterable[str] = ()) -> RuleMatch | None:
        """First rule (in precedence order) whose keywords and pattern match ``text``.

        ``following`` are the lines after ``text`` for multi-line rules. A rule sees at most
        :data:`MAX_LINE_CHARS` of each line and :data:`MAX_BLOCK_CHARS` of a block.
        """
        skip_ids = frozenset(skip)
        line = _utf8(text[:MAX_LINE_CHARS])
        hits = sorted(self._keyword_set.Match(line) or ()) if self.rules else []
        block_cache: dict[int, bytes] = {}
        for rule in (self.rules[i] for i in hits):
            if rule.id in skip_ids:
                continue
            subject = line
            if rule.lines_after and following:
                subject = block_cache.get(rule.lines_after, b"")
                if not subject:
                    subject = _block(text, following[: rule.lines_after])
                    block_cache[rule.lines_after] = subject
            m = rule.pattern.search(subject)
            if m is not None:
                groups = {k: _text(v) for k, v in m.groupdict().items() if v is not None}
                # Alternatives may name one value twice (host2, gpu_index2...): fold them back.
                for key in list(groups):
                    base = key.rstrip("0123456789")
                    if base != key and base in _KNOWN_GROUPS:
                        groups.setdefault(base, groups.pop(key))
                return RuleMatch(rule, groups, _text(m.group(0)))
        return None


def _utf8(text: str) -> bytes:
    # Matching UTF-8 bytes (RE2's native input) spares the per-rule str re-encoding.
    return text.encode("utf-8", "replace")


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _block(text: str, following: Sequence[str]) -> bytes:
    joined = "\n".join((text[:MAX_LINE_CHARS], *(f[:MAX_LINE_CHARS] for f in following)))
    return _utf8(joined[:MAX_BLOCK_CHARS])


def builtin_rules_text() -> str:
    return resources.files("trainguard.evidence").joinpath("data/signatures.toml").read_text()


def load_rules(extra: Sequence[Path] = ()) -> RuleSet:
    """The built-in rules, with operator rule files (tried first, same id replaces) on top."""
    builtin = parse_rules_toml(builtin_rules_text(), "signatures.toml")
    user: list[Rule] = []
    for path in extra:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read rules file {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"rules file {path} is not UTF-8 text") from exc
        user.extend(parse_rules_toml(text, str(path)))
    builtin = with_cuda_catalog(builtin)
    user_ids = {r.id for r in user}
    return RuleSet([*user, *(r for r in builtin if r.id not in user_ids)])


def with_cuda_catalog(rules: Sequence[Rule]) -> list[Rule]:
    """``rules`` with the CUDA error catalog's code-driven rule (``cuda_errors.py``) just before
    the generic CUDA error rule, whose priority it shares: a CUDA error a rule above reads by its
    words keeps that reading, one none reads is read by the catalog before the generic fallback
    (``classify.py`` takes the category and action from the error it identifies)."""
    out = list(rules)
    at = next((i for i, r in enumerate(out) if r.id == GENERIC_RULE_ID), None)
    if at is None:
        return out
    keywords = rule_keywords()
    base = BASE_READING
    out.insert(at, Rule(
        id=CUDA_RULE_ID, category=base.category, action=base.action,
        severity=Severity.FATAL, confidence=base.confidence, priority=out[at].priority,
        keywords=keywords, keywords_case=False, pattern=compile_re2(rule_pattern()),
        keyword_rx=compile_re2("|".join(f"(?:{k})" for k in keywords), ignore_case=True),
        lines_after=0, summary="CUDA error", source="cuda_errors.csv"))
    return out


__all__ = ["MAX_BLOCK_CHARS", "MAX_LINE_CHARS", "Pattern", "PatternMatch", "Rule", "RuleMatch",
           "RuleSet", "compile_re2", "load_rules", "parse_rules_toml", "render_summary",
           "with_cuda_catalog"]
