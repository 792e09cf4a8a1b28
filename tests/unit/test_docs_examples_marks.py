"""Every shell example in the docs is runnable as written or marked with what it needs."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_examples import (
    SKIP_MARKS,
    MarkError,
    all_examples,
    doc_files,
    examples_in,
    unrunnable_reason,
)

PAGE = Path("page.md")


def test_docs_have_runnable_and_marked_examples() -> None:
    examples = all_examples()
    assert any(ex.runnable for ex in examples)
    assert any(not ex.runnable for ex in examples)
    assert {p.name for p in doc_files()} >= {"README.md", "index.md", "quickstart.md"}


def test_every_unmarked_example_can_run() -> None:
    """An unmarked block is one the integration test runs: it must be a command, not a
    synopsis; a block that cannot run here must say why with a mark."""
    problems = [f"{ex.where}: {why}" for ex in all_examples() if ex.runnable
                for why in [unrunnable_reason(ex)] if why]
    assert not problems, "mark these (see docs/development.md) or make them runnable:\n" + \
        "\n".join(problems)


def test_make_demo_and_make_test_are_never_run() -> None:
    for ex in all_examples():
        if "make demo" in ex.script() or "make test" in ex.script():
            assert not ex.runnable, f"{ex.where}: runs make demo/test; mark it long-running"


def test_marks_parse_and_apply() -> None:
    text = ("intro\n\n<!-- example: exit=1 -->\n```bash\ntrainguard xid explain 9999\n```\n\n"
            "<!-- example: needs-cluster needs-gpu -->\n```console\n$ srun -N2 \\\n"
            "    hostname\nnode1\n$ echo done\ndone\n```\n\n```bash\necho plain\n```\n")
    first, second, third = examples_in(PAGE, text)
    assert first.runnable and first.expected_exit == 1 and first.line == 4
    assert not second.runnable and second.marks == ("needs-cluster", "needs-gpu")
    assert second.script() == "srun -N2 \\\n    hostname\necho done\n"
    assert third.runnable and third.expected_exit == 0 and third.script() == "echo plain\n"


def test_non_shell_blocks_are_not_examples() -> None:
    text = "```python\nimport os\n```\n\n```text\ntrainguard x [--json]\n```\n"
    assert examples_in(PAGE, text) == []


@pytest.mark.parametrize("text, message", [
    ("<!-- example: needs-quantum -->\n```bash\nls\n```\n", "unknown example mark"),
    ("<!-- example: exit=300 -->\n```bash\nls\n```\n", "unknown example mark"),
    ("<!-- example: -->\n```bash\nls\n```\n", "names nothing"),
    ("<!-- example: needs-gpu -->\n\nsome text\n\n```bash\nls\n```\n", "not followed"),
    ("<!-- example: needs-gpu -->\n```python\nprint()\n```\n", "not a shell block"),
    ("text\n<!-- example: needs-gpu -->\n", "not followed"),
    ("<!-- examples: needs-gpu -->\n```bash\nls\n```\n", "malformed example mark"),
])
def test_bad_marks_are_refused(text: str, message: str) -> None:
    with pytest.raises(MarkError, match=message):
        examples_in(PAGE, text)


@pytest.mark.parametrize("body", [
    "trainguard detect metrics/ [--json]\n",
    "trainguard logs classify PATH... --json\n",
    "trainguard detect ... --json\n",
    "trainguard inject kill|hang --run-dir DIR\n",
    "trainguard watch --prometheus <URL>\n",
    "# only a comment\n",
])
def test_synopses_are_not_runnable(body: str) -> None:
    (example,) = examples_in(PAGE, f"```bash\n{body}```\n")
    assert unrunnable_reason(example) is not None


def test_a_console_block_without_prompts_is_not_runnable() -> None:
    (example,) = examples_in(PAGE, "```console\noutput only\n```\n")
    assert unrunnable_reason(example) == "no command in it (a console block needs '$ ' lines)"


def test_commands_with_brackets_in_code_are_runnable() -> None:
    body = ("python -c \"print([1, 2][-1])\"\n"
            "trainguard simulate --nodes 2 --out sim # a [comment]\n")
    (example,) = examples_in(PAGE, f"```bash\n{body}```\n")
    assert unrunnable_reason(example) is None


def test_skip_marks_are_documented() -> None:
    page = (doc_files()[0].parent / "docs" / "development.md").read_text(encoding="utf-8")
    for mark in [*SKIP_MARKS, "exit=N"]:
        assert f"`{mark}`" in page, f"{mark} is not described in docs/development.md"
