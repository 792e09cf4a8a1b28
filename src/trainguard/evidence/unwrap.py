"""A log line out of its terminal's or collector's wrapping, as the program wrote it.

Logs reach an operator through a coloured terminal or logger, ``kubectl logs --prefix`` or a
node's Docker json-file records. The classifier (rules, traceback reading, the cue and config
models) reads a line through :func:`unwrap_line`; evidence keeps the line as it was read
(``EvidenceLine.text``; ``EvidenceLine.program_text`` is the unwrapped one). Other collector
prefixes (time stamps, Ray's worker tag, docker compose's service column) need no unwrapping:
the rules are not anchored at the line start, and a traceback is read under its header's
prefix (``tracebacks.collector_prefix``).
"""

from __future__ import annotations

import json
import re

from trainguard.textsafe import strip_escapes

# `kubectl logs --prefix`: "[pod/<pod>/<container>] " before each line.
_KUBECTL_PREFIX = re.compile(r"\[pod/[\w.-]+/[\w.-]+\] ")
# Docker's json-file log driver (a node's /var/lib/docker/containers/<id>/<id>-json.log):
# {"log":"<line>\n","stream":"stderr","time":"<RFC 3339>"}.
_DOCKER_JSON = '{"log":'


def unwrap_line(line: str) -> str:
    """``line`` as the program wrote it, out of a terminal's or a collector's wrapping: without
    ANSI colour and cursor sequences, without ``kubectl logs --prefix``'s
    ``[pod/<pod>/<container>]`` (its words are the collector's: a ``pod`` would read as a
    scheduler's word), and out of a Docker json-file record (its ``time`` kept in front, as a
    time stamp). The classifier reads this; evidence keeps the line as it was.

        >>> unwrap_line("[pod/trainer-0/pytorch] \\x1b[31mKilled\\x1b[0m")
        'Killed'
        >>> unwrap_line('{"log":"Killed\\\\n","stream":"stderr","time":"2026-03-03T04:12:55Z"}')
        '2026-03-03T04:12:55Z Killed'
    """
    if line.startswith(_DOCKER_JSON):
        line = _docker_record(line)
    line = strip_escapes(line)
    if line.startswith("[pod/") and (m := _KUBECTL_PREFIX.match(line)):
        return line[m.end():]
    return line


def _docker_record(line: str) -> str:
    """A Docker json-file record's line, its ``time`` in front; ``line`` if it is not one."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    text = record.get("log") if isinstance(record, dict) else None
    if not isinstance(text, str):
        return line
    when = record.get("time")
    text = text.rstrip("\r\n")
    return f"{when} {text}" if isinstance(when, str) and when else text


__all__ = ["unwrap_line"]
