"""docs/reference/cli.md is what scripts/gen_cli_reference.py renders from the commands now."""

from __future__ import annotations

import difflib
from pathlib import Path

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


def test_every_command_has_a_section() -> None:
    """The walk reaches nested groups: each leaf command has its own heading and usage line."""
    import typer.main

    root = typer.main.get_command(gen._app())
    rendered = gen.render()
    ctx = root.context_class(root, info_name="trainguard")
    for name in root.list_commands(ctx):
        sub = root.get_command(ctx, name)
        assert sub is not None
        assert f"`trainguard {name}`" in rendered
        assert f"Usage: trainguard {name} " in rendered
        for leaf in getattr(sub, "commands", {}) or {}:
            assert f"Usage: trainguard {name} {leaf} " in rendered


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
