"""Command help written as wrapped source text, shown as paragraphs the terminal wraps.

Why this exists: with rich installed, typer renders help in its "rich" markup mode, where only
the *first* paragraph of a command's help has its single line breaks joined; every later
paragraph is printed with the line breaks of the source (typer's ``rich_utils._get_help_text``
and ``_fix_linebreaks``). A docstring wrapped at 100 columns therefore shows hard breaks in
mid-sentence in every paragraph after the first. :func:`reflow` joins the lines of each prose
paragraph; indented lines (examples) and ``\\b`` paragraphs keep their breaks.

    >>> reflow("Summary line\\nwraps.\\n\\nMore text\\nhere.\\n\\n    trainguard x --y\\n    z")
    'Summary line wraps.\\n\\nMore text here.\\n\\n    trainguard x --y\\n    z'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

__all__ = ["reflow", "reflowed_doc"]

F = TypeVar("F", bound=Callable[..., object])


def reflow(text: str) -> str:
    """`text` (dedented) with each prose paragraph on one line."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(_join(p) for p in paragraphs)


def _join(paragraph: str) -> str:
    lines = paragraph.splitlines()
    if paragraph.startswith("\b") or any(line[:1].isspace() for line in lines):
        return paragraph
    return " ".join(line.strip() for line in lines)


def reflowed_doc(func: F) -> F:
    """Decorator: the command's docstring (its help) reflowed, see :func:`reflow`."""
    if func.__doc__:
        func.__doc__ = reflow(func.__doc__)
    return func
