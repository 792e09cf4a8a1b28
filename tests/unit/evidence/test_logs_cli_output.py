"""`trainguard logs classify` output: log text never reaches the terminal with escape sequences.

Requirement (issue #16): a log line (or file name) carrying ``ESC[31m`` or an OSC title sequence
is printed through ``terminal_safe`` in the table, the warnings and the summary line; ``--json``
keeps the text as it was (JSON escaping already makes it safe). Folded repeats are counted.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trainguard.cli.main import app

runner = CliRunner()
EVIL = "\x1b]0;owned\x07\x1b[31m"
LINE = f"[rank3]: RuntimeError: {EVIL}boom at step 12\x1b[0m"
XID = ("May  1 10:00:00 node2 kernel: [812345.678901] NVRM: Xid (PCI:0000:3b:00): 79, "
       "pid=48211, name=python, GPU has fallen off the bus.")


def test_escape_sequences_do_not_reach_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / f"rank{EVIL}3.log"
    log.write_text(LINE + "\n")
    (tmp_path / f"core{EVIL}.dump").write_bytes(b"\x7fELF\x02\x01\x01\x00" * 100)

    result = runner.invoke(app, ["logs", "classify", "--limit", "0", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert "boom at step 12" in result.stdout
    assert "rank" in result.stdout and "3.log" in " ".join(result.stdout.split())
    assert "binary file skipped" in result.stderr
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream


def test_json_keeps_the_text_escaped_not_stripped(tmp_path: Path) -> None:
    log = tmp_path / "rank3.log"
    log.write_text(LINE + "\n")

    result = runner.invoke(app, ["logs", "classify", "--json", str(log)])

    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout  # JSON writes it as \u001b
    (incident,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert EVIL in incident["root_cause"]["evidence"][0]["text"]


def test_folded_repeats_are_counted_in_the_output(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text((XID + "\n") * 300)

    result = runner.invoke(app, ["logs", "classify", "--year", "2024", str(log)])

    assert result.exit_code == 0, result.output
    assert "(x300)" in result.stdout
    assert "300 event(s) (1 after folding repeats) -> 1 incident(s)" in result.stderr
    js = runner.invoke(app, ["logs", "classify", "--json", "--year", "2024", str(log)])
    (incident,) = [json.loads(line) for line in js.stdout.splitlines()]
    assert incident["event_count"] == 300
    assert incident["root_cause"]["fields"]["repeats"] == "300"


def test_max_gib_bounds_a_gzip_with_a_warning(tmp_path: Path) -> None:
    import gzip

    gz = tmp_path / "kern.log.gz"
    gz.write_bytes(gzip.compress(b"\n" * (4 << 20) + XID.encode() + b"\n"))

    result = runner.invoke(app, ["logs", "classify", "--max-gib", "0.001", str(gz)])

    assert result.exit_code == 0, result.output
    assert "the rest was not scanned" in result.stderr
    assert "No failure incidents found." in result.stdout
