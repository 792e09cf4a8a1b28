"""`trainguard run`'s snapshot options: parsed into the JobSpec, bad values one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.recover.spec import JobSpec, parse_failure_domains, parse_snapshot_every

runner = CliRunner()


def _spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"command": ("python", "t.py"), "nodes": ("a", "b"),
                               "spares": ("c",), "nproc_per_node": 1, "run_dir": Path("/r")}
    return JobSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "value"), [("auto", "auto"), ("OFF", "off"), ("5", 5),
                                             (" 1 ", 1)])
def test_snapshot_every_values(text: str, value: object) -> None:
    assert parse_snapshot_every(text) == value
    assert _spec(snapshot_every=value).snapshots is (value != "off")


@pytest.mark.parametrize("text", ["0", "-3", "often", "1.5", ""])
def test_bad_snapshot_every(text: str) -> None:
    with pytest.raises(ConfigError, match="--snapshot-every must be auto, off or an integer"):
        parse_snapshot_every(text)


def test_failure_domains_inline_file_and_json(tmp_path: Path) -> None:
    assert parse_failure_domains("a=r1, b=r2") == {"a": "r1", "b": "r2"}
    lines = tmp_path / "domains.txt"
    lines.write_text("# racks\na r1\nb=r2\n\nc  r1  # spare\n")
    assert parse_failure_domains(str(lines)) == {"a": "r1", "b": "r2", "c": "r1"}
    doc = tmp_path / "domains.json"
    doc.write_text('{"a": "r1", "c": "r2"}')
    assert parse_failure_domains(str(doc)) == {"a": "r1", "c": "r2"}


@pytest.mark.parametrize(("text", "match"), [
    ("a=r1,b", "entry 2 is not node=domain"), ("a=r1,a=r2", "node 'a' is given twice"),
    ("/no/such/domains", "cannot read /no/such/domains")])
def test_bad_failure_domains(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_failure_domains(text)


def test_spec_refuses_unknown_domain_nodes_and_a_relative_root() -> None:
    with pytest.raises(ConfigError, match="names node 'zz', which is not in --nodes"):
        _spec(failure_domains={"a": "r1", "zz": "r2"})
    with pytest.raises(ConfigError, match="--snapshot-root must be an absolute path"):
        _spec(snapshot_root=Path("shm"))
    assert _spec(failure_domains={"a": "r1", "c": "r2"}).warm is False  # --warm: opt in


@pytest.mark.parametrize(("opts", "message"), [
    (["--snapshot-every", "never"], "--snapshot-every must be auto, off or an integer >= 1"),
    (["--failure-domains", "a=r1,zz=r2"], "--failure-domains names node 'zz'"),
])
def test_cli_rejects_bad_options_in_one_line_without_creating_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opts: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--no-db", "--nodes", "a,b", "--spares", "c",
                                 "--run-dir", str(tmp_path / "run"), *opts, "--", "true"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_names_the_snapshot_options() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ("--snapshot-root", "--snapshot-every", "--failure-domains", "--no-warm"):
        assert option in result.output


@pytest.mark.parametrize(("restore", "line"), [
    ({"source": "memory", "step": 25, "steps_lost": 3},
     "attempt 1 restored step 25 from memory (3 steps lost)"),
    ({"source": "mixed", "step": 25, "steps_lost": 0},
     "attempt 1 restored step 25 from memory (own hosts and buddies) (0 steps lost)"),
    ({"source": "disk", "step": 20, "steps_lost": 1, "why": "no snapshot is complete"},
     "attempt 1 restored step 20 from disk (1 step lost): no snapshot is complete"),
    ({"source": "none", "step": None, "steps_lost": 7},
     "attempt 1 restored from scratch (no checkpoint) (7 steps lost)"),
    ({"source": "unknown", "step": None, "steps_lost": None},
     "attempt 1 resumed as the script chose (it reports no resume to trainguard: no SDK)"),
])
def test_the_terminal_lists_each_recovery(restore: dict[str, object], line: str) -> None:
    from trainguard.cli.run import recovery_line

    assert recovery_line(1, restore) == line
