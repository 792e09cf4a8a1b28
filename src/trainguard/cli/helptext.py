"""Command help written as wrapped source text, shown as paragraphs the terminal wraps.

Why this exists: with rich installed, typer renders help in its "rich" markup mode, where only
the *first* paragraph of a command's help has its single line breaks joined; every later
paragraph is printed with the line breaks of the source (typer's ``rich_utils._get_help_text``
and ``_fix_linebreaks``). A docstring wrapped at 100 columns therefore shows hard breaks in
mid-sentence in every paragraph after the first. :func:`reflow` joins the lines of each prose
paragraph; indented lines (examples) and ``\\b`` paragraphs keep their breaks. Rich mode also
reads every help text as markup, where a bracketed word is a style tag and vanishes:
:func:`prepare` escapes the help of every built command and parameter (:func:`literal`).

    >>> reflow("Summary line\\nwraps.\\n\\nMore text\\nhere.\\n\\n    trainguard x --y\\n    z")
    'Summary line wraps.\\n\\nMore text here.\\n\\n    trainguard x --y\\n    z'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from rich.markup import escape

__all__ = ["literal", "prepare", "reflow", "reflowed_doc"]

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


def literal(text: str) -> str:
    """`text` as Rich markup that shows it verbatim: typer's rich mode reads every help text as
    markup, where ``[floors]`` or ``[default: 127.0.0.1]`` are style tags and vanish.

        >>> literal("a [floors] table")
        'a \\\\[floors] table'
    """
    return escape(text)


def prepare(command: Any) -> None:
    """The help of a built command, of its parameters and of its sub-commands (recursively),
    ready for typer's rich mode: paragraphs reflowed, text shown as written (:func:`literal`).

    Call it once per built command (typer builds new objects on every ``get_command``)."""
    if command.help:
        command.help = literal(reflow(command.help))
    if command.short_help:
        command.short_help = literal(command.short_help)
    if command.epilog:
        command.epilog = literal(command.epilog)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = literal(param.help)
    for sub in getattr(command, "commands", {}).values():
        prepare(sub)
