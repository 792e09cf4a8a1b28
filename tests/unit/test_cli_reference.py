"""docs/reference/cli.md is what scripts/gen_cli_reference.py renders from the commands now."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from script_module import REPO, load_script

gen = load_script("scripts/gen_cli_reference.py", "gen_cli_reference")


def test_cli_reference_is_current() -> None:
    page = REPO / "docs" / "reference" / "cli.md"
    committed = page.read_text(encoding="utf-8") if page.is_file() else ""
    rendered = gen.render()
    if committed != rendered:
        diff = "".join(list(difflib.unified_diff(
            committed.splitlines(keepends=True), rendered.splitlines(keepends=True),
            "docs/reference/cli.md (committed)", "rendered from the commands"))[:40])
        raise AssertionError(
            "docs/reference/cli.md is stale: run `python scripts/gen_cli_reference.py`\n" + diff)


def _commands(command: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, command
    subcommands = getattr(command, "commands", None) or {}
    for name in list(subcommands):
        yield from _commands(subcommands[name], f"{path} {name}")


def test_every_command_and_option_is_on_the_page() -> None:
    """The walk reaches nested groups, and each command's section lists its real options (the
    root group hands out summary-only stand-ins through get_command)."""
    import typer.main

    rendered = gen.render()
    sections = dict(zip(re.findall(r"^#+ `(trainguard[^`]*)`$", rendered, re.M),
                        re.split(r"^#+ `trainguard[^`]*`$", rendered, flags=re.M)[1:],
                        strict=True))
    commands = list(_commands(typer.main.get_command(gen._app()), "trainguard"))
    assert len(commands) > 20
    for path, command in commands:
        assert path in sections, f"no section for {path}"
        assert f"Usage: {path} " in sections[path]
        for param in command.params:
            if getattr(param, "hidden", False) or not param.opts[0].startswith("-"):
                continue
            assert param.opts[0] in sections[path], f"{path}: {param.opts[0]} missing"


def test_rich_escapes_are_undone() -> None:
    from rich.markup import escape

    for text in ["a [floors] table", "[default: 127.0.0.1]", "x \\[y] z", "plain [1, 2]"]:
        assert gen._unescape_markup(escape(text)) == text
    assert "\\[" not in gen.render()


def test_plain_text_not_rich() -> None:
    rendered = gen.render()
    assert not any(box in rendered for box in "╭╮╰╯│─"), "help rendered with Rich panels"
    assert "\x1b[" not in rendered


def test_check_mode_reports_stale_page(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    out.write_text("old\n", encoding="utf-8")
    assert gen.main(["--check", "--output", str(out)]) == 1
    assert out.read_text(encoding="utf-8") == "old\n"
    assert gen.main(["--output", str(out)]) == 0
    assert gen.main(["--check", "--output", str(out)]) == 0
