"""The static command table that `trainguard --help` is printed from matches the commands, and
the table is what keeps start-up short: listing the commands imports none of them, running one
imports only its own module (issue #28)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import trainguard.cli
from trainguard.cli.commands import COMMANDS, Entry
from trainguard.cli.helptext import reflow
from trainguard.cli.lazygroup import build

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "signatures" / "xid.log"


def _first_paragraph(help_text: str) -> str:
    source = help_text.replace("\\[", "[")
    return " ".join(reflow(source).split("\n\n")[0].split())


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.name)
def test_the_listed_summary_is_the_first_paragraph_of_the_help(entry: Entry) -> None:
    command = build(entry)
    assert command.name == entry.name
    real = _first_paragraph(command.short_help or command.help or "")
    assert " ".join(entry.summary.split()) == real, (
        f"commands.py: the summary of {entry.name!r} should read {real!r}")


def test_every_command_group_is_in_the_table() -> None:
    """A new module-level ``typer.Typer`` in trainguard.cli is registered as a command (or
    nested in a group that is)."""
    apps = [t for t in (_typer(e.target) for e in COMMANDS) if t is not None]
    reachable = {id(t) for t in apps} | {id(g.typer_instance) for t in apps
                                         for g in t.registered_groups}
    for info in pkgutil.iter_modules(trainguard.cli.__path__):
        module = importlib.import_module(f"trainguard.cli.{info.name}")
        for attr, value in vars(module).items():
            if isinstance(value, typer.Typer) and (info.name, attr) != ("main", "app"):
                assert id(value) in reachable, f"trainguard.cli.{info.name}.{attr}"


def _typer(target: str) -> typer.Typer | None:
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    return value if isinstance(value, typer.Typer) else None


def test_names_are_unique() -> None:
    names = [e.name for e in COMMANDS]
    assert len(names) == len(set(names))


_PROBE = """
import json, sys
from trainguard.cli.main import main
sys.argv = ["trainguard", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_after(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.splitlines()[-1]))


def _command_modules() -> set[str]:
    return {e.target.partition(":")[0] for e in COMMANDS}


def test_listing_the_commands_imports_none_of_them() -> None:
    loaded = _modules_after("--help")
    assert not loaded & _command_modules()
    assert not loaded & {"numpy", "sqlalchemy", "httpx", "torch", "pandas"}


def test_a_command_imports_its_own_module_only() -> None:
    loaded = _modules_after("logs", "classify", str(FIXTURE))
    assert loaded & _command_modules() == {"trainguard.cli.logs"}
    assert not loaded & {"numpy", "sqlalchemy", "httpx", "torch", "pandas"}


def test_running_the_module_gives_no_import_warning() -> None:
    """`python -m trainguard.cli.main`: the package must not import main itself first."""
    proc = subprocess.run([sys.executable, "-m", "trainguard.cli.main", "--version"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("trainguard ")
    assert proc.stderr == ""
