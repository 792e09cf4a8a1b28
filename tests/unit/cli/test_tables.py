"""Tables fit the terminal (issue #18): at 80 and 120 columns every number is shown in full
(never cut to ``…``) and text never wraps one word per line: `ckpt profile`'s stage table and
`logs classify`'s incidents, and `fit_table` on its own."""

from __future__ import annotations

import io
import json
import random
import re
from itertools import pairwise
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from trainguard.cli import console as console_mod
from trainguard.cli.main import app
from trainguard.cli.tables import fit_table

runner = CliRunner()
WIDTHS = [80, 120]
CASES = Path(__file__).resolve().parents[2] / "data" / "realworld" / "cases"
_BOX = re.compile(r"[│┃┏┓┗┛┡┩┠┨━─┳┻╇╈┼┬┴├┤└┘┌┐║═╔╗╚╝╠╣╦╩╬|]")


def _tokens(line: str) -> list[str]:
    return _BOX.sub(" ", line).split()


def check_readable(text: str) -> None:
    """No ``…``, and never two lines in a row that hold one short word each (a long path
    folded over two lines is not text wrapped word by word)."""
    assert "…" not in text, text
    short = [len(t) == 1 and len(t[0]) < 20 for t in map(_tokens, text.splitlines())]
    assert not any(a and b for a, b in pairwise(short)), text


def render(table: Table, width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False)
    console.print(fit_table(console, table))
    return buf.getvalue()


def _wide_table(columns: int, rows: int, seed: int) -> tuple[Table, list[str]]:
    rng = random.Random(seed)
    table = Table(title="a wide table of numbers")
    table.add_column("name")
    for c in range(columns):
        table.add_column(f"stage {c} GB/s", justify="right")
    numbers: list[str] = []
    for r in range(rows):
        cells = [f"{rng.uniform(0, 10 ** rng.randint(0, 6)):.3f}" for _ in range(columns)]
        numbers += cells
        table.add_row(f"row {r}", *cells)
    return table, numbers


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("columns", "rows"), [(3, 4), (15, 5), (15, 40), (40, 3)])
def test_numbers_are_shown_in_full(width: int, columns: int, rows: int) -> None:
    table, numbers = _wide_table(columns, rows, seed=columns * 100 + rows)
    text = render(table, width)
    check_readable(text)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    shown = {tok for line in text.splitlines() for tok in _tokens(line)}
    assert set(numbers) <= shown  # every number whole, on one line


@pytest.mark.parametrize("width", WIDTHS)
def test_running_text_is_not_one_word_per_line(width: int) -> None:
    words = "the NCCL watchdog timed out after 600 s waiting for all_reduce #4412 on rank 7"
    table = Table()
    for name in ("#", "category", "action", "severity", "where", "root cause", "related"):
        table.add_column(name, overflow="fold")
    for n in range(3):
        table.add_row(str(n + 1), "nccl_timeout_hang", "restart_job", "non-fatal",
                      f"node{n} gpu 0000:3b:00.0 rank {n}", f"{words} ({n})",
                      f"{1000 + n:,} events, 3 hosts, 8 ranks")
    text = render(table, width)
    check_readable(text)
    flat = " ".join(text.split())
    for n in range(3):
        assert f"{1000 + n:,} events, 3 hosts, 8 ranks" in flat


@pytest.fixture
def columns(monkeypatch: pytest.MonkeyPatch) -> object:
    def set_width(width: int) -> None:
        monkeypatch.setattr(console_mod.out, "width", width)
    return set_width


@pytest.mark.parametrize("width", WIDTHS)
def test_logs_classify_fits(width: int, columns: object) -> None:
    doc = runner.invoke(app, ["logs", "classify", str(CASES), "--json"])
    assert doc.exit_code == 0
    incidents = [json.loads(line) for line in doc.stdout.splitlines()]
    columns(width)  # type: ignore[operator]
    r = runner.invoke(app, ["logs", "classify", str(CASES), "--limit", "0"])
    assert r.exit_code == 0, r.output
    check_readable(r.stdout)
    flat = " ".join(r.stdout.split())
    for inc in incidents:
        assert f"{len(inc['hosts'])} hosts, {len(inc['ranks'])} ranks" in flat


@pytest.mark.parametrize("width", WIDTHS)
def test_ckpt_profile_stage_table_fits(width: int, columns: object, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    columns(width)  # type: ignore[operator]
    r = runner.invoke(app, ["ckpt", "profile", "--dir", str(tmp_path), "--size", "2MiB",
                            "--stripe", "256KiB", "--streams", "1,2,4,8,16", "--repeat", "1",
                            "--device", "cpu"])
    assert r.exit_code == 0, r.output
    check_readable(r.stdout)
    assert max(len(line.rstrip()) for line in r.stdout.splitlines()) <= width
    # every stage of every stream count is there, each value a whole number
    for stage in ("blocking", "serialize", "checksum", "write GB/s", "save GB/s", "load GB/s"):
        [line] = [ln for ln in r.stdout.splitlines() if re.search(rf"[│┃] {stage} +[│┃]", ln)]
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()][1:]
        assert len(cells) == 5 and all(re.fullmatch(r"\d+\.\d+|n/a|-", c) for c in cells), line
