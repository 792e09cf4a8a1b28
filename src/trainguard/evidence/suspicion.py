"""A calibrated ``unknown``: lines no signature explains but that read like a failure.

When no rule fires, a log that says ``fatal``, ``killed`` or ``lost`` still tells an operator
that *something* broke. Such a line becomes an informational ``failure_words`` event (category
``unknown``) carrying the line and a low confidence; :func:`trainguard.evidence.correlate`
reports these as an ``unknown`` incident only when no signature explains anything in their
time window, so a known cause is never displaced and a healthy log stays quiet.

The confidence says how sure the line alone is that a failure happened (never which kind):

- words that mean a process or device is gone (fatal, killed, lost, panic, abort, crash,
  core dumped, segfault, not responding): :data:`STRONG_CONFIDENCE`;
- words that may as well be retried or logged in passing (error, failed, timeout, exception,
  refused, unreachable): :data:`WEAK_CONFIDENCE`.

Counted-zero phrases ("0 errors", "no failures", "errors=0") and identifiers that merely contain
a word (``error_file``, ``NCCL_IB_TIMEOUT``) do not count.

    >>> suspicion("node3: fatal: GPU job died") is not None
    True
    >>> suspicion("step 10 | 0 errors | loss 2.1") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.evidence.events import CUE_CHARS
from trainguard.evidence.rules import Pattern, compile_re2

SIGNATURE = "failure_words"
STRONG_CONFIDENCE = 0.4
WEAK_CONFIDENCE = 0.2

_STRONG = (r"fatal|killed|lost|panic(?:ked)?|abort(?:ed|ing)?|crash(?:ed|es)?|core dumped|"
           r"segfault|not responding|died|hung|stuck")
_WEAK = (r"errors?|fail(?:ed|ure|ures|s|ing)?|time[- ]?out|timed out|exceptions?|refused|"
         r"unreachable|denied|unavailable|cannot|could not|unable to")
WORD_ALTERNATIVES = f"{_STRONG}|{_WEAK}"
"""The failure words as one regex alternation (no context): for benchmarks and documentation."""
# Words only: '_' and '.' next to a word make it part of an identifier or a file name
# ("struct.error", "failed.txt"), but dots that end a sentence ("Killed.", "will now abort.",
# "failed...") leave it a word. A colour code just before a word ("ESC[31mERROR") still leaves it
# a word (the prefilter reads the raw chunk). The context never crosses a line end: the
# prefilter runs over whole chunks.
_AFTER = r"(?:$|[^\w.\n]|\.+(?:$|[^\w.\n]))"
WORDS_SOURCE = (rf"(?im:(?:^|[^\w.\n]|\x1b\[[\d;]*m)(?:{WORD_ALTERNATIVES}){_AFTER})")
"""RE2 source of the failure words, for the scanner's prefilter."""

_WORDS: Pattern = compile_re2(WORDS_SOURCE)
_STRONG_RX: Pattern = compile_re2(rf"(?im:(?:^|[^\w.\n])(?:{_STRONG}){_AFTER})")
_COUNTED_ZERO: Pattern = compile_re2(
    r"(?i:\b(?:0|no|zero|without(?: any)?) (?:errors?|failures?|exceptions?|timeouts?)\b|"
    r"\b(?:errors?|failures?|failed|timeouts?|lost)\s*[:=]\s*0+\b|"
    r"\bno (?:error|failure)s? (?:found|detected|reported)\b)")


@dataclass(frozen=True, slots=True)
class Suspicion:
    """Why a line looks like a failure: the words found and the confidence they carry."""

    words: tuple[str, ...]
    confidence: float


def suspicion(text: str) -> Suspicion | None:
    """The failure words in ``text`` (counted-zero phrases removed), or ``None``."""
    line = text[:CUE_CHARS]
    if _WORDS.search(line) is None:
        return None
    cleaned = _strip(line, _COUNTED_ZERO)
    words = _words(cleaned)
    if not words:
        return None
    strong = _STRONG_RX.search(cleaned) is not None
    return Suspicion(words, STRONG_CONFIDENCE if strong else WEAK_CONFIDENCE)


def _strip(text: str, rx: Pattern) -> str:
    out: list[str] = []
    pos = 0
    while (m := rx.search(text[pos:])) is not None:
        m_text = m.group(0)
        at = text.find(m_text, pos)
        out.append(text[pos:at])
        pos = at + max(1, len(m_text))
    out.append(text[pos:])
    return " ".join(out)


def _words(text: str) -> tuple[str, ...]:
    found: list[str] = []
    pos = 0
    while len(found) < 8 and (m := _WORDS.search(text[pos:])) is not None:
        raw = m.group(0)
        at = text.find(raw, pos)
        word = raw.strip(" \t:;,.()[]<>\"'!?/=-+*#|").lower()
        if word and word not in found:
            found.append(word)
        pos = at + max(1, len(raw) - 1)
    return tuple(found)


__all__ = ["SIGNATURE", "STRONG_CONFIDENCE", "WEAK_CONFIDENCE", "WORDS_SOURCE", "WORD_ALTERNATIVES",
           "Suspicion", "suspicion"]
