"""Failure signatures: loading the TOML rule files and matching one line against them.

A :class:`RuleSet` holds the rules in precedence order plus one combined *prefilter* over all of
their keywords. The scanner runs only the prefilter over the bulk of a log (with RE2 when
installed: a DFA, hundreds of MB/s); a rule's full Python regex runs only on the few lines the
prefilter lets through.

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

from trainguard.errors import ConfigError
from trainguard.taxonomy import CATEGORY_PRIORITY, DEFAULT_ACTION, Action, Category, Severity

log = logging.getLogger(__name__)

try:  # RE2 gives a linear-time DFA for the prefilter; plain `re` is ~15x slower on it.
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _re2 = None

# Built-in, code-driven signatures (see xid.py); listed so keywords reach the prefilter.
XID_KEYWORDS: tuple[str, ...] = ("NVRM: Xid", "SXid", "fallen off the bus", "NVRM: GPU at PCI",
                                 "The NVIDIA GPU", "Xid=", "XID error")
TRACEBACK_KEYWORD = "Traceback (most recent call last)"
_KNOWN_GROUPS = frozenset({"rank", "host", "gpu_pci", "gpu_index", "xid", "exit_code"})


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
    pattern: re.Pattern[str]
    keyword_rx: re.Pattern[str]
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


def _compile(pattern: str, flags: int, where: str, key: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise ConfigError(f"{where}: {key} is not a valid regex: {exc}") from exc


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
    kw_flags = 0 if keywords_case else re.IGNORECASE
    keyword_rx = _compile("|".join(f"(?:{k})" for k in keywords), kw_flags, where, "keywords")
    if _re2 is not None:
        try:
            _re2.compile("|".join(f"(?:{k})" for k in keywords))
        except Exception as exc:  # re2 raises its own error type
            raise ConfigError(f"{where}: keywords must be RE2-compatible regexes "
                              f"(no lookarounds/backreferences): {exc}") from exc
    pattern_src = raw["pattern"]
    if not isinstance(pattern_src, str):
        raise ConfigError(f"{where}: pattern must be a string")
    flags = re.IGNORECASE if raw.get("ignore_case") else 0
    pattern = _compile(pattern_src, flags, where, "pattern")
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
    """Rules in precedence order plus the combined prefilter."""

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
        self.multiline_start = re.compile("|".join(multi)) if multi else None
        self.prefilter: Any
        if _re2 is not None:
            opts = _re2.Options()
            opts.max_mem = 256 << 20
            self.prefilter = _re2.compile(self.prefilter_source.encode(), opts)
            self.engine = "re2"
        else:
            log.warning("google-re2 is not installed: log scanning falls back to Python's re "
                        "(~15x slower). pip install google-re2")
            self.prefilter = re.compile(self.prefilter_source.encode())
            self.engine = "re"

    def match(self, text: str, following: Sequence[str] = (),
              skip: Iterable[str] = ()) -> RuleMatch | None:
        """First rule (in precedence order) whose keywords and pattern match ``text``.

        ``following`` are the lines after ``text`` for multi-line rules.
        """
        skip_ids = frozenset(skip)
        for rule in self.rules:
            if rule.id in skip_ids or not rule.keyword_rx.search(text):
                continue
            if rule.lines_after:
                block = "\n".join((text, *following[: rule.lines_after]))
                m = rule.pattern.search(block)
            else:
                m = rule.pattern.search(text)
            if m is not None:
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                # Alternatives may name one value twice (host2, gpu_index2...): fold them back.
                for key in list(groups):
                    base = key.rstrip("0123456789")
                    if base != key and base in _KNOWN_GROUPS:
                        groups.setdefault(base, groups.pop(key))
                return RuleMatch(rule, groups, m.group(0))
        return None


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
    user_ids = {r.id for r in user}
    return RuleSet([*user, *(r for r in builtin if r.id not in user_ids)])


__all__ = ["Rule", "RuleMatch", "RuleSet", "load_rules", "parse_rules_toml", "render_summary"]
