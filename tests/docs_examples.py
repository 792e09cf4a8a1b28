"""The shell examples of the documentation: which exist, how they are marked, what runs.

A shell example is a fenced block whose language is ``bash``, ``console``, ``sh`` or ``shell``
in ``docs/**/*.md`` or ``README.md``. An HTML comment on the line right before it marks what it
needs (``<!-- example: needs-cluster -->``); see docs/development.md, "Shell examples are tested".
Marks that name something a test machine lacks skip the block; ``exit=N`` sets the exit status
the block must end with (0 when absent). ``tests/unit/test_docs_examples_marks.py`` checks the
marks, ``tests/integration/test_docs_examples.py`` runs every block that is not skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SHELL_LANGUAGES = frozenset({"bash", "console", "sh", "shell"})

# Mark -> why a block with it is not run by the tests.
SKIP_MARKS: dict[str, str] = {
    "needs-cluster": "several real hosts, a scheduler (Slurm), ssh, or root",
    "needs-gpu": "an NVIDIA GPU",
    "needs-service": "a server or mount the docs cannot assume (Prometheus, Alertmanager, NFS)",
    "long-running": "minutes, until interrupted, or it changes the repository",
    "after-demo": "what `make demo` wrote under demo-data/",
}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARK = re.compile(r"^\s*<!--\s*example:(?P<marks>.*?)-->\s*$")
_MARK_LIKE = re.compile(r"^\s*<!--\s*example", re.IGNORECASE)
_EXIT = re.compile(r"^exit=(?P<code>\d{1,3})$")
# What a synopsis looks like: optional parts in brackets, alternatives, elided arguments.
_PLACEHOLDER = re.compile(r"\[--\w|\[-[a-zA-Z][] |]|\s\.\.\.(\s|$)|\w\.\.\.|<[A-Z_]+>|[\w-]\|[\w-]")


class MarkError(ValueError):
    """A mark that is malformed, unknown, or in the wrong place."""


@dataclass(frozen=True)
class Example:
    """One fenced shell block."""

    path: Path  # the Markdown file
    line: int  # 1-based line of the opening fence
    language: str
    body: str  # the block's text, as written
    marks: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def skip_reasons(self) -> tuple[str, ...]:
        return tuple(SKIP_MARKS[m] for m in self.marks if m in SKIP_MARKS)

    @property
    def runnable(self) -> bool:
        return not self.skip_reasons

    @property
    def expected_exit(self) -> int:
        for mark in self.marks:
            found = _EXIT.match(mark)
            if found:
                return int(found["code"])
        return 0

    def script(self) -> str:
        """The bash script the block stands for: a ``console`` block's ``$ `` lines (with
        their backslash continuations), any other block as written."""
        if self.language != "console":
            return self.body
        commands: list[str] = []
        continuing = False
        for line in self.body.splitlines():
            if continuing:
                commands.append(line)
            elif line.startswith("$ "):
                commands.append(line[2:])
            else:
                continue
            continuing = line.rstrip().endswith("\\")
        return "\n".join(commands) + ("\n" if commands else "")


def parse_marks(text: str) -> tuple[str, ...]:
    """The marks of one ``<!-- example: ... -->`` comment; MarkError for unknown ones."""
    marks = tuple(text.split())
    if not marks:
        raise MarkError("an example mark names nothing")
    for mark in marks:
        if mark in SKIP_MARKS:
            continue
        found = _EXIT.match(mark)
        if found and int(found["code"]) <= 255:
            continue
        known = ", ".join([*SKIP_MARKS, "exit=N"])
        raise MarkError(f"unknown example mark {mark!r} (known: {known})")
    return marks


def examples_in(path: Path, text: str | None = None) -> list[Example]:
    """Every shell block of one Markdown file. MarkError for a mark that is malformed,
    unknown, or not right before a shell block."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Example] = []
    pending: tuple[tuple[str, ...], int] | None = None  # marks, line
    i = 0
    while i < len(lines):
        line = lines[i]
        mark = _MARK.match(line)
        if mark:
            if pending is not None:
                raise MarkError(f"{path}:{pending[1]}: example mark not followed by a shell block")
            pending = (parse_marks(mark["marks"]), i + 1)
            i += 1
            continue
        if _MARK_LIKE.search(line):
            raise MarkError(f"{path}:{i + 1}: malformed example mark: {line.strip()!r}")
        fence = _FENCE.match(line)
        if not fence:
            if pending is not None and line.strip():
                raise MarkError(f"{path}:{pending[1]}: example mark not followed by a shell block")
            i += 1
            continue
        language = fence["info"].strip().split(" ")[0].lower() if fence["info"].strip() else ""
        close = re.compile(rf"^\s*{re.escape(fence['fence'][0])}{{{len(fence['fence'])},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(_dedent(lines[j], len(fence["indent"])))
            j += 1
        if language in SHELL_LANGUAGES:
            marks = pending[0] if pending is not None else ()
            found.append(Example(path, i + 1, language, "\n".join(body) + "\n", marks))
        elif pending is not None:
            raise MarkError(f"{path}:{pending[1]}: example mark before a {language or 'plain'} "
                            "block, not a shell block")
        pending = None
        i = j + 1
    if pending is not None:
        raise MarkError(f"{path}:{pending[1]}: example mark not followed by a shell block")
    return found


def _dedent(line: str, width: int) -> str:
    return line[width:] if line[:width].strip() == "" else line.lstrip()


def doc_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def all_examples() -> list[Example]:
    return [ex for path in doc_files() for ex in examples_in(path)]


def unrunnable_reason(example: Example) -> str | None:
    """Why an unmarked block could not be run as written (None: it can): nothing to run, or a
    synopsis with placeholders instead of a command."""
    script = example.script()
    commands = [ln for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not commands:
        return "no command in it (a console block needs '$ ' lines)"
    for command in commands:
        code = command.split(" #", 1)[0]
        if _PLACEHOLDER.search(code):
            return f"looks like a synopsis, not a command: {command.strip()!r}"
    return None
