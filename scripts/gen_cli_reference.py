"""Write docs/reference/cli.md from the `trainguard` command itself.

Every command and group of the typer app (``trainguard.cli.main:app``, turned into its click
command with ``typer.main.get_command``) is rendered as its plain-text ``--help``: usage, help
text and options, at a fixed width, without Rich, so the page is the same on every machine.

    python scripts/gen_cli_reference.py           # rewrite docs/reference/cli.md
    python scripts/gen_cli_reference.py --check   # exit 1 when the page is stale

``tests/unit/test_cli_reference.py`` fails when the committed page differs from what this
script renders.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any

import typer
import typer.main

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "reference" / "cli.md"
WIDTH = 100
COMMAND = "python scripts/gen_cli_reference.py"

HEADER = f"""# CLI reference

Every `trainguard` command and group with its usage, help and options, as `--help` prints them
(plain text). Generated from the commands themselves by `{COMMAND}`;
do not edit by hand (`tests/unit/test_cli_reference.py` fails when this page is stale).

Exit status, for every command: `0` success; `1` the command did its work and the outcome is a
failure or a finding; `2` the input (arguments, files, addresses) is wrong or unusable; `130`
interrupted.
"""


def _app() -> typer.Typer:
    module = importlib.import_module("trainguard.cli.main")
    app = module.app
    assert isinstance(app, typer.Typer)
    return app


# What rich.markup.escape() makes of a "[tag]": one more backslash before it, and any before
# it doubled. The help texts are escaped for typer's Rich mode; plain text shows them unescaped.
_ESCAPED_TAG = re.compile(r"(\\*)\\(\[[a-z#/@][^[]*?\])")


def _unescape_markup(text: str) -> str:
    return _ESCAPED_TAG.sub(lambda m: m[1][: len(m[1]) // 2] + m[2], text)


def _plain_help(command: Any, ctx: Any) -> str:
    """`command`'s help as click prints it without Rich (typer falls back to plain click
    formatting when the command's markup mode is None)."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    text: str = _unescape_markup(command.get_help(ctx))
    return "\n".join(line.rstrip() for line in text.splitlines())


def _walk(command: Any, name: str, parent: Any, depth: int, out: list[str]) -> None:
    ctx = command.context_class(command, info_name=name, parent=parent,
                                terminal_width=WIDTH, max_content_width=WIDTH)
    path = ctx.command_path
    out.append(f"{'#' * min(depth + 2, 4)} `{path}`\n")
    out.append("```text")
    out.append(_plain_help(command, ctx))
    out.append("```\n")
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        return
    for sub_name in command.list_commands(ctx):
        # The mapping, not get_command(): the root group lists its commands lazily and hands
        # out a stand-in with the summary only; indexing builds the real command.
        sub = subcommands.get(sub_name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        _walk(sub, sub_name, ctx, depth + 1, out)


def render() -> str:
    """The whole page, as the current source of the commands gives it."""
    root = typer.main.get_command(_app())
    out = [HEADER]
    _walk(root, "trainguard", None, 0, out)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 (writing nothing) when the page differs from the commands")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    page = render()
    current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
    if args.check:
        if current != page:
            print(f"{args.output} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if current != page:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(page, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        print(f"{args.output} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
