"""The `trainguard` command line: help, output formats, exit codes, user errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from trainguard.cli.main import app

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "signatures"
XID_LOG = FIXTURES / "xid.log"
JSON_KEYS = {"category", "action", "severity", "host", "gpu", "rank", "xid", "summary",
             "root_cause", "related"}

runner = CliRunner()


def invoke(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input)


def _command_paths() -> list[tuple[str, ...]]:
    """Every command and sub-command registered on the typer app (walked, not listed)."""
    paths: list[tuple[str, ...]] = []

    def walk(cmd: object, prefix: tuple[str, ...]) -> None:
        paths.append(prefix)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, (*prefix, name))

    walk(typer.main.get_command(app), ())
    return paths


COMMANDS = _command_paths()


def _assert_one_error_line(result: Result) -> None:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")


# --- help (architecture test: new commands are covered automatically) --------------------------


def test_command_walk_finds_the_known_commands() -> None:
    assert set(COMMANDS) >= {("logs", "classify"), ("xid", "explain"), ("xid", "list")}


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "trainguard" for p in COMMANDS])
def test_help(path: tuple[str, ...]) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout
    assert " ".join(("trainguard", *path)) in " ".join(result.stdout.split())


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("trainguard ")


def _is_group(path: tuple[str, ...]) -> bool:
    cmd: object = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return hasattr(cmd, "commands")


def _lists_without_a_command(path: tuple[str, ...]) -> bool:
    """Groups that do something on their own, and commands whose every option has a default
    (``trainguard report`` reads the default store)."""
    cmd: object = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    if not hasattr(cmd, "commands"):
        return not any(p.required for p in cmd.params)  # type: ignore[attr-defined]
    return bool(getattr(cmd, "invoke_without_command", False))


@pytest.mark.parametrize("path", [p for p in COMMANDS
                                  if len(p) < 2 and not _lists_without_a_command(p)],
                         ids=lambda p: " ".join(p) or "trainguard")
def test_group_without_a_command_shows_usage_and_exits_2(path: tuple[str, ...]) -> None:
    """A group shows its help; a command that needs an option says which, in one line."""
    result = invoke(*path)
    assert result.exit_code == 2
    if _is_group(path):
        assert "Usage:" in result.output
    else:
        _assert_one_error_line(result)
        assert "missing" in result.stderr and f"trainguard {' '.join(path)} --help" in result.stderr


# --- logs classify -----------------------------------------------------------------------------


def test_classify_table() -> None:
    result = invoke("logs", "classify", str(XID_LOG))
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    for text in ("Failure incidents", "gpu_hardware", "reboot_node", "fatal", "node7",
                 "0000:3b:00.0", "XID 79"):
        assert text in out
    assert "1 file(s)" in result.stderr
    assert "1 incident(s)" in result.stderr


def test_classify_json_is_one_object_per_incident(tmp_path: Path) -> None:
    log = tmp_path / "all.log"
    log.write_text(XID_LOG.read_text() + (FIXTURES / "cuda_oom.log").read_text()
                   .replace("[rank0]:", "2024-05-01T14:00:00Z node3 python[48211]: [rank0]:"))

    result = invoke("logs", "classify", "--json", "--year", "2024", str(log))

    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert set(row) >= JSON_KEYS
        assert isinstance(row["related"], list)
        assert isinstance(row["root_cause"], dict)
    assert [r["category"] for r in rows] == ["gpu_hardware", "oom_gpu"]
    first = rows[0]
    assert (first["host"], first["gpu"], first["xid"], first["action"], first["severity"]) == (
        "node7", "0000:3b:00.0", 79, "reboot_node", "fatal")
    assert first["root_cause"]["evidence"][0]["line"] == 1


def test_classify_no_incidents_is_success(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("[2024-05-01 10:00:00,123] [INFO] [trainer] step 100 | loss 2.7801\n")
    result = invoke("logs", "classify", str(log))
    assert result.exit_code == 0, result.output
    assert "No failure incidents found." in result.stdout

    result = invoke("logs", "classify", "--json", str(log))
    assert result.exit_code == 0
    assert result.stdout == ""


def test_classify_all_shows_informational_incidents() -> None:
    log = str(FIXTURES / "fp16_loss_scale_overflow.log")
    assert invoke("logs", "classify", "--json", log).stdout == ""
    result = invoke("logs", "classify", "--json", "--all", log)
    assert [json.loads(r)["severity"] for r in result.stdout.splitlines()] == ["info"]


def test_classify_reads_stdin() -> None:
    result = invoke("logs", "classify", "--json", "-", input=XID_LOG.read_text())
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["xid"] for r in rows] == [79]
    assert rows[0]["root_cause"]["evidence"][0]["path"] == "<stdin>"


def test_classify_directory_and_host_from_path(tmp_path: Path) -> None:
    node = tmp_path / "node17"
    node.mkdir()
    (node / "train.log").write_text((FIXTURES / "cuda_illegal_address.log").read_text())
    result = invoke("logs", "classify", "--json", "--host-from-path", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert [json.loads(r)["host"] for r in result.stdout.splitlines()] == ["node17"]


def test_classify_with_a_warning_still_succeeds(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    result = invoke("logs", "classify", str(empty), str(XID_LOG))
    assert result.exit_code == 0
    assert f"warning: {empty}: empty file" in " ".join(result.stderr.split())


# --- exit codes for unusable input -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "binary", "empty-dir"])
def test_nothing_readable_exits_1(tmp_path: Path, kind: str) -> None:
    if kind == "missing":
        target = tmp_path / "nope.log"
    elif kind == "binary":
        target = tmp_path / "core.dump"
        target.write_bytes(b"\x7fELF\x02\x01\x01\x00" * 100)
    else:
        target = tmp_path / "empty-dir"
        target.mkdir()

    result = invoke("logs", "classify", str(target))

    assert result.exit_code == 2  # the input is at fault
    assert "Traceback" not in result.output
    assert "error: no input could be read" in result.stderr
    assert str(target) in " ".join(result.stderr.split())


# --- usage errors: exit 2 ----------------------------------------------------------------------


def test_classify_without_paths_is_a_usage_error() -> None:
    result = invoke("logs", "classify")
    assert result.exit_code == 2
    _assert_one_error_line(result)
    assert "missing argument" in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[[rule]\nid = 'x'\n", "not valid TOML", id="invalid-toml"),
        pytest.param(
            "[[rule]]\nid = 'x'\ncategory = 'gremlins'\nkeywords = ['x']\npattern = 'x'\n",
            "category", id="unknown-category"),
        pytest.param(
            "[[rule]]\nid = 'x'\ncategory = 'storage_io'\nkeywords = ['x']\npattern = 'x(('\n",
            "not a valid regex", id="bad-regex"),
        pytest.param("[[rule]]\nid = 'x'\ncategory = 'storage_io'\npattern = 'x'\n", "keywords",
                     id="missing-keywords"),
        pytest.param(
            "[[rule]]\nid = 'x'\ncategory = 'storage_io'\nkeywords = ['x']\npattern = 'x'\n"
            "severty = 'info'\n", "severty", id="unknown-key"),
    ],
)
def test_bad_rules_file_is_one_error_line_and_exit_2(tmp_path: Path, text: str,
                                                     expected: str) -> None:
    rules = tmp_path / "site-rules.toml"
    rules.write_text(text)

    result = invoke("logs", "classify", "--rules", str(rules), str(XID_LOG))

    assert result.exit_code == 2
    assert expected in result.stderr
    assert str(rules) in result.stderr
    _assert_one_error_line(result)


def test_missing_rules_file_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("logs", "classify", "--rules", str(tmp_path / "nope.toml"), str(XID_LOG))
    assert result.exit_code == 2
    assert "cannot read rules file" in result.stderr
    assert "Traceback" not in result.output


# --- custom rules ------------------------------------------------------------------------------


def test_custom_rule_is_used(tmp_path: Path) -> None:
    rules = tmp_path / "site-rules.toml"
    rules.write_text(
        "[[rule]]\n"
        "id = 'site_lustre_evict'\n"
        "category = 'storage_io'\n"
        "keywords = ['evicted by lustre']\n"
        "pattern = 'client (?P<client>\\S+) evicted by lustre'\n"
        "summary = 'Lustre evicted {client}'\n")
    log = tmp_path / "kern.log"
    log.write_text("May  1 10:00:00 node4 kernel: client 10.0.0.4@o2ib evicted by lustre\n")

    result = invoke("logs", "classify", "--json", "--rules", str(rules), str(log))

    assert result.exit_code == 0, result.output
    [row] = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["category"] == "storage_io"
    assert row["action"] == "check_storage"
    assert row["root_cause"]["signature"] == "site_lustre_evict"
    assert row["root_cause"]["summary"] == "Lustre evicted 10.0.0.4@o2ib"
    assert row["host"] == "node4"

    without = invoke("logs", "classify", "--json", str(log))
    assert without.stdout == ""


def test_custom_rule_with_a_builtin_id_replaces_it(tmp_path: Path) -> None:
    rules = tmp_path / "site-rules.toml"
    rules.write_text(
        "[[rule]]\n"
        "id = 'cuda_oom'\n"
        "category = 'oom_gpu'\n"
        "action = 'restart_job'\n"
        "severity = 'non-fatal'\n"
        "keywords = ['out of memory']\n"
        "pattern = 'CUDA out of memory'\n"
        "summary = 'site: OOM, the scheduler retries with a smaller batch'\n")
    log = str(FIXTURES / "cuda_oom.log")

    builtin = json.loads(invoke("logs", "classify", "--json", log).stdout)
    custom = json.loads(invoke("logs", "classify", "--json", "--rules", str(rules), log).stdout)

    assert (builtin["action"], builtin["severity"]) == ("fix_config", "fatal")
    assert (custom["action"], custom["severity"]) == ("restart_job", "non-fatal")
    assert custom["root_cause"]["summary"].startswith("site: OOM")


# --- xid ---------------------------------------------------------------------------------------


def test_xid_explain() -> None:
    result = invoke("xid", "explain", "79")
    assert result.exit_code == 0
    out = " ".join(result.stdout.split())
    for text in ("XID 79", "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "gpu_hardware",
                 "reboot_node", "RESTART_BM"):
        assert text in out


def test_xid_explain_json() -> None:
    result = invoke("xid", "explain", "79", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["xid"] == 79
    assert data["in_catalog"] is True
    assert (data["category"], data["action"], data["severity"]) == (
        "gpu_hardware", "reboot_node", "fatal")
    assert data["advice"]


def test_xid_explain_unknown_xid() -> None:
    result = invoke("xid", "explain", "99999", "--json")
    assert result.exit_code == 1  # the lookup found nothing
    data = json.loads(result.stdout)
    assert data["xid"] == 99999
    assert data["in_catalog"] is False
    assert data["severity"] == "non-fatal" and data["action"] == "none"
    assert not data["nvidia_fatal"] and "XIDs 1-" in data["catalog"]
    assert "not in trainguard's XID catalog" in data["advice"]
    result = invoke("xid", "explain", "99999")
    assert result.exit_code == 1 and "fatal" not in result.stdout.replace("non-fatal", "")
    assert "not in trainguard's XID catalog" in " ".join(result.stdout.split())


@pytest.mark.parametrize("arg", ["abc", "7.5", "-3"])
def test_xid_explain_non_integer_is_a_usage_error(arg: str) -> None:
    result = invoke("xid", "explain", "--", arg)
    assert result.exit_code == 2


def test_xid_explain_not_a_number_is_a_usage_error() -> None:
    result = invoke("xid", "explain", "seventy-nine")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_xid_list() -> None:
    result = invoke("xid", "list")
    assert result.exit_code == 0
    out = " ".join(result.stdout.split())
    assert "XID catalog" in out
    assert "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in out


def test_xid_list_json() -> None:
    from trainguard.evidence import xid_catalog

    result = invoke("xid", "list", "--json")
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["xid"] for r in rows] == list(xid_catalog())
    assert set(rows[0]) >= {"xid", "name", "category", "action", "severity"}


# --- the installed entry point -----------------------------------------------------------------


def _entry_point() -> str:
    exe = Path(sys.executable).parent / "trainguard"
    assert exe.is_file(), f"console script not installed next to {sys.executable}"
    return str(exe)


def test_installed_entry_point() -> None:
    proc = subprocess.run([_entry_point(), "logs", "classify", "--json", str(XID_LOG)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    [row] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert (row["category"], row["xid"], row["host"]) == ("gpu_hardware", 79, "node7")


def test_installed_entry_point_user_error_is_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "site-rules.toml"
    rules.write_text("[[rule]]\nid = 'x'\ncategory = 'gremlins'\nkeywords = ['x']\n"
                     "pattern = 'x'\n")
    proc = subprocess.run([_entry_point(), "logs", "classify", "--rules", str(rules),
                           str(XID_LOG)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
