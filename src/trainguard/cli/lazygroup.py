"""The root command group: commands imported on first use, usage errors as one line.

`trainguard --help` lists the commands from :data:`trainguard.cli.commands.COMMANDS` without
importing them; `trainguard logs classify` imports the logs module and nothing of `run`,
`watch` or `report` (their numpy, SQLAlchemy and HTTP stacks cost more than a small
command's work: issue #28). A usage error (unknown option, missing or bad value) is one line
on stderr and exit status 2, like every other input error, instead of typer's framed panel.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import typer
import typer.main
from typer._click import Command, Context
from typer._click.exceptions import (
    BadParameter,
    ClickException,
    MissingParameter,
    NoArgsIsHelpError,
    UsageError,
)
from typer.core import TyperCommand, TyperGroup

from trainguard.cli.commands import COMMANDS, Entry
from trainguard.cli.console import EXIT_INPUT, fail
from trainguard.cli.helptext import literal, prepare
from trainguard.cli.options import show_duration_defaults

__all__ = ["LazyCommands", "RootGroup", "build", "usage_line"]


def _nothing() -> None:
    """Placeholder callback: makes the holder app below a group."""


def build(entry: Entry) -> Command:
    """The command (or group) of `entry`, registered as `trainguard` always registered it and
    with its help prepared (:func:`trainguard.cli.helptext.prepare`)."""
    module_name, _, attr = entry.target.partition(":")
    module = importlib.import_module(module_name)
    target = getattr(module, attr)
    holder = typer.Typer(add_completion=False)
    holder.callback()(_nothing)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=entry.name)
    else:
        holder.command(
            entry.name,
            help=getattr(module, entry.help_attr) if entry.help_attr else None,
            no_args_is_help=entry.no_args_is_help,
            context_settings=None if entry.interspersed else {"allow_interspersed_args": False},
        )(target)
    group = cast(TyperGroup, typer.main.get_command(holder))
    command = group.commands[entry.name]
    prepare(command)
    show_duration_defaults(command)
    return command


class LazyCommands(MutableMapping[str, Command]):
    """Name -> command, built on first lookup; iterating lists the names without building."""

    def __init__(self, entries: Sequence[Entry], added: MutableMapping[str, Command]) -> None:
        self._entries = {e.name: e for e in entries}
        self._built: dict[str, Command] = dict(added)

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            self._built[name] = build(self._entries[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._entries.pop(name, None)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self._entries
        yield from (name for name in self._built if name not in self._entries)

    def __len__(self) -> int:
        return len(self._entries.keys() | self._built.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._built

    def listed(self, name: str) -> Command | None:
        """The command as a listing shows it: built if it already is, else a stand-in that
        carries the name and the summary only."""
        if name in self._built:
            return self._built[name]
        entry = self._entries.get(name)
        return None if entry is None else TyperCommand(
            name, help=literal(entry.summary), no_args_is_help=entry.no_args_is_help)


def usage_line(exc: ClickException) -> str:
    """``trainguard run: no such option: --foo (see trainguard run --help)``."""
    message = _lower_first(" ".join(exc.format_message().split()).rstrip("."))
    if isinstance(exc, BadParameter) and not isinstance(exc, MissingParameter) \
            and exc.param is not None:
        # "--interval 'fast' is not a duration": trainguard's parsers start with the value
        # (typer passes their ValueError on through pydantic, as "Value error, ...")
        said = _lower_first(" ".join(exc.message.removeprefix("Value error, ").split()))
        name = max(exc.param.opts, key=len, default=exc.param.name or "")
        message = f"{name} {said}" if said.startswith(("'", '"')) else f"{name}: {said}"
        message = message.rstrip(".")
    ctx: Context | None = getattr(exc, "ctx", None)
    if ctx is None:
        return message
    path = ctx.command_path
    hint = f" (see {path} --help)" if ctx.command.get_help_option(ctx) is not None else ""
    return f"{path}: {message}{hint}"


def _lower_first(text: str) -> str:
    """``No such option`` -> ``no such option``; ``XID`` stays."""
    return text[0].lower() + text[1:] if text[:1].isupper() and text[1:2].islower() else text


@contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except NoArgsIsHelpError:
        raise  # the help is the message (typer printed it); exit status 2
    except UsageError as exc:
        fail(usage_line(exc), EXIT_INPUT)
    except ClickException as exc:
        fail(usage_line(exc), exc.exit_code)


class RootGroup(TyperGroup):
    """`trainguard` itself: see the module docstring."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        prepare(self)  # before the commands are added: prepare() walks the built ones
        self.commands = LazyCommands(COMMANDS, self.commands)

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        commands = self.commands
        return commands.listed(cmd_name) if isinstance(commands, LazyCommands) \
            else commands.get(cmd_name)

    def resolve_command(self, ctx: Context, args: list[str]
                        ) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return name, (self.commands[name] if name is not None else command), rest

    def make_context(self, info_name: str | None, args: list[str],
                     parent: Context | None = None, **extra: Any) -> Context:
        with _one_line_errors():
            return super().make_context(info_name, args, parent, **extra)
        raise AssertionError("unreachable")  # for mypy: fail() does not return

    def invoke(self, ctx: Context) -> Any:
        with _one_line_errors():
            return super().invoke(ctx)
