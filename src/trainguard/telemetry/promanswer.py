"""What an HTTP answer to a Prometheus API request is, in a few words a person can act on.

The Prometheus HTTP API answers every request, success or error, with a JSON envelope
``{"status": "success" | "error", ...}``. Anything else (an HTML page, a login form, an empty
body, some other JSON) comes from something that is not the Prometheus API: a wrong URL, a
proxy, Grafana, a web server. :func:`classify` tells the two apart from the body itself (headers
are often wrong behind proxies), and :func:`excerpt` turns a foreign body into a short,
terminal-safe description, never the whole page.

    >>> classify(200, b'{"status":"success","data":[]}').envelope
    {'status': 'success', 'data': []}
    >>> classify(404, b"<html><title>404 Not Found</title><body>...</body></html>").what
    "an HTML page ('404 Not Found')"
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from trainguard.textsafe import terminal_safe

__all__ = ["EXCERPT_CHARS", "Answer", "classify", "excerpt"]

EXCERPT_CHARS = 80
"""Longest excerpt of a foreign body quoted in a message."""

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer, classified.

    `envelope` is the Prometheus JSON envelope when the body is one, else None; `what` then
    describes the body in a few words (``"an HTML page ('404 Not Found')"``).
    """

    status: int
    envelope: dict[str, Any] | None
    what: str

    @property
    def is_prometheus(self) -> bool:
        return self.envelope is not None

    @property
    def error(self) -> str:
        """The Prometheus error of an ``"error"`` envelope (``errorType: error``), else what
        the body is."""
        doc = self.envelope
        if doc is None or not doc.get("error"):
            return self.what
        kind = doc.get("errorType")
        text = _shorten(terminal_safe(str(doc["error"])), 300)
        return f"{kind}: {text}" if kind else text


def classify(status: int, body: bytes) -> Answer:
    """Classify an answer: a Prometheus envelope, or what else the body is."""
    doc = _json(body)
    if isinstance(doc, dict) and doc.get("status") in ("success", "error"):
        return Answer(status, doc, "a Prometheus API answer")
    if doc is not _NOT_JSON:
        return Answer(status, None, f"JSON that is not a Prometheus API answer ({excerpt(body)})")
    return Answer(status, None, excerpt(body))


def excerpt(body: bytes, limit: int = EXCERPT_CHARS) -> str:
    """A short, one-line, terminal-safe description of a body that is not what was expected."""
    head = body[:65536]
    if not body.strip():
        return "an empty body"
    if _looks_html(head):
        title = _TITLE.search(head)
        text = _text(title.group(1)) if title else _text(_TAG.sub(" ", _decode(head)).encode())
        return f"an HTML page ({_shorten(text, limit)!r})" if text else "an HTML page"
    return repr(_shorten(_text(head), limit))


_NOT_JSON = object()


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _looks_html(head: bytes) -> bool:
    start = head.lstrip()[:256].lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml")) \
        or b"<html" in start


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _text(raw: bytes) -> str:
    return _SPACE.sub(" ", terminal_safe(_decode(raw), keep_newlines=True)).strip()


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
