"""`trainguard history import|list|delete` as an operator uses them: hand-made fault files in the
layouts of real traces (InfiniteHBD's JSON events in relative days, a LANL-like CSV with one
column per category, a CSV with a strptime format and a zone, JSON lines with ISO times and
durations), the printed counts and refusals, the errors (one line, exit 2, nothing stored), the
window of an import, and the store afterwards. A few cases run the real CLI as a subprocess; the
rest use typer's runner on the same app."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cli_run import one_error_line, tg
from typer.testing import CliRunner, Result

from trainguard.cli.main import app

DAY = 86400.0
runner = CliRunner()


def _type(level: str, cls: str, desc: str) -> str:
    return json.dumps({"Level": level, "Class": cls, "Desc": desc})


XID = _type("Hardware Failure", "GPU", "GPU xid Error")
DBE = _type("Hardware Failure", "GPU", "GPU DBE(Double Bit ECC) > Threshold")
STRESS = _type("Other Failure", "Stress Test Failure", "Unknown Error")
LINK = _type("Hardware Failure", "Network", "Link Down")
KUBELET = _type("Software Failure", "Software Tool", "Kubelet Date Absent")


def _ev(node: str, t: object, what: str, kind: str) -> str:
    return (f'{{"node_id": "{node}", "event_time": {json.dumps(t)}, "event_type": "{what}", '
            f'"fault_type": {kind}}}')


# InfiniteHBD's layout (relative days, fault_start/fault_end, Level/Class/Desc); made-up rows.
# One event per line, so the record on line k is HBD_EVENTS[k - 2].
HBD_EVENTS = [
    _ev("a1", 3.8955, "fault_start", XID),      # 2
    _ev("a1", 4.5, "fault_end", XID),           # 3  a1: 3.8955-4.5
    _ev("b2", 5.0, "fault_end", STRESS),        # 4  refused: an end without a start
    _ev("c3", 6.0, "fault_start", LINK),        # 5
    _ev("c3", 6.5, "fault_start", KUBELET),     # 6  another type on c3: accepted, one outage
    _ev("c3", 7.0, "fault_end", LINK),          # 7  c3 Link Down: 6-7
    _ev("c3", 7.5, "fault_end", KUBELET),       # 8  c3 Kubelet: 6.5-7.5
    _ev("a1", 4.0, "fault_start", DBE),         # 9  refused: earlier than a1's line 3
    _ev("f6", 8.0, "fault_start", XID),         # 10
    _ev("d4", 9.0, "fault_start", DBE),         # 11 still open
    _ev("e5", "soon", "fault_start", XID),      # 12 refused: not a number of days
    _ev("f6", 10.0, "fault_end", XID),          # 13 f6: 8-10
]
HBD_JSON = "[\n" + ",\n".join(HBD_EVENTS) + "\n]\n"
HBD_COUNTS = {"records": 12, "faults": 5, "duplicates_merged": 0, "overlaps_merged": 2,
              "open_faults": 1, "refused": 3}
HBD_REFUSED_LINES = [4, 9, 12]

HBD_MAP = """\
# first match wins
[[map]]
pattern = "Hardware Failure / GPU / GPU DBE*"
category = "memory-ecc"

[[map]]
pattern = "hardware failure / gpu / *"
category = "gpu"
"""


def invoke(*args: str | Path, input: str | None = None) -> Result:
    return runner.invoke(app, [str(a) for a in args], input=input)


def flat(text: str) -> str:
    """Output with line wraps undone (a narrow console wraps the summary line)."""
    return " ".join(text.split())


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def import_json(*args: str | Path) -> dict[str, Any]:
    result = invoke("history", "import", *args, "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def listed(db: Path) -> list[dict[str, Any]]:
    result = invoke("history", "list", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    histories: list[dict[str, Any]] = json.loads(result.stdout)["histories"]
    return histories


# --- an InfiniteHBD-like trace ------------------------------------------------------------------


def test_import_prints_counts_and_refused_lines_and_stores(tmp_path: Path) -> None:
    """The real CLI: only --time-unit days and --fleet-size; the counts and each refused line."""
    trace = write(tmp_path / "trace.json", HBD_JSON)
    proc = tg("history", "import", trace, "--time-unit", "days", "--fleet-size", "20",
              "--db", tmp_path / "s.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = flat(proc.stdout)
    c = HBD_COUNTS
    assert (f"trace.json: read {c['records']} records (json) -> {c['faults']} faults on 4 of 20 "
            "nodes over 10.0 days") in text
    assert f"merged {c['duplicates_merged']} duplicate(s), {c['overlaps_merged']} fault(s)" in text
    assert f"{c['open_faults']} still open; refused {c['refused']}" in text
    refused = [line for line in proc.stdout.splitlines() if "refused line" in line]
    assert [int(r.split("refused line ")[1].split(":")[0]) for r in refused] == HBD_REFUSED_LINES
    assert "has no open fault_start" in refused[0]
    assert "earlier than its previous event (line 3)" in refused[1]
    assert "'soon' is not a number of days" in refused[2]
    assert "stored in sqlite:" in text and "Traceback" not in proc.stderr
    [history] = listed(tmp_path / "s.db")
    assert (history["name"], history["fleet_size"], history["faults"]) == ("trace.json", 20, 5)
    assert history["window_start"] == 0.0 and history["window_end"] == 10 * DAY
    assert history["days"] == pytest.approx(10.0)
    assert history["counts"]["refused"] == 3 and history["format"] == "json"


def test_import_json_has_the_same_counts_and_every_refusal(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    doc = import_json(trace, "--time-unit", "days", "--fleet-size", "20",
                      "--db", tmp_path / "s.db")
    assert {k: doc["counts"][k] for k in HBD_COUNTS} == HBD_COUNTS
    assert doc["counts"]["mapped"] == 0
    assert [r["line"] for r in doc["refused"]] == HBD_REFUSED_LINES
    assert all(r["reason"] for r in doc["refused"])
    assert doc["stored"] is True and doc["name"] == "trace.json" and doc["fleet_size"] == 20
    assert doc["window"] == {"start": 0.0, "end": 10 * DAY, "days": pytest.approx(10.0)}
    [history] = listed(tmp_path / "s.db")
    assert history["id"] == doc["history_id"]
    assert history["counts"] == doc["counts"]


def test_more_refusals_than_shown_are_all_in_json(tmp_path: Path) -> None:
    lines = ['{"node": "n0", "start": 1, "end": 2}']
    lines += [f'{{"node": "n{i}", "start": "x{i}", "end": 2}}' for i in range(1, 24)]
    trace = write(tmp_path / "bad.jsonl", "\n".join(lines) + "\n")
    db = tmp_path / "s.db"
    result = invoke("history", "import", trace, "--fleet-size", "30", "--time-unit", "h",
                    "--db", db, "--dry-run")
    assert result.exit_code == 0, result.output
    shown = [line for line in result.stdout.splitlines() if "refused line" in line]
    assert len(shown) == 20 and "and 3 more (--json lists all)" in result.stdout
    doc = import_json(trace, "--fleet-size", "30", "--time-unit", "h", "--db", db, "--dry-run")
    assert [r["line"] for r in doc["refused"]] == list(range(2, 25))
    assert doc["counts"]["refused"] == 23 and doc["counts"]["faults"] == 1


def test_history_list_text(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    import_json(write(tmp_path / "trace.json", HBD_JSON), "--time-unit", "days",
                "--fleet-size", "20", "--db", db, "--name", "hbd")
    result = invoke("history", "list", "--db", db)
    assert result.exit_code == 0
    [row] = [line.split() for line in result.stdout.splitlines() if line.split()[:1] == ["hbd"]]
    assert row[:5] == ["hbd", "5", "20", "10.0", "3"]


# --- errors -------------------------------------------------------------------------------------


def test_fleet_size_missing_is_one_line(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    proc = tg("history", "import", trace, "--time-unit", "days", "--db", tmp_path / "s.db",
              cwd=tmp_path)
    assert proc.returncode == 2
    assert "--fleet-size is required" in one_error_line(proc.stderr)
    assert not (tmp_path / "s.db").exists()


def test_typo_in_the_file_name_stores_nothing(tmp_path: Path) -> None:
    write(tmp_path / "trace.json", HBD_JSON)
    proc = tg("history", "import", "trcae.json", "--time-unit", "days", "--fleet-size", "20",
              "--db", tmp_path / "s.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no such file: trcae.json" in one_error_line(proc.stderr)
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("text", ["Node went down on Tuesday\nback up Wednesday\n",
                                  '[{"node": "a", "start": 1,\n "end": 2}\n',
                                  "{node: a}\n{node: b}\n"],
                         ids=["prose", "cut-json", "not-jsonl"])
def test_a_file_that_is_not_a_history_is_one_line(tmp_path: Path, text: str) -> None:
    bad = write(tmp_path / "notes.json", text)
    result = invoke("history", "import", bad, "--fleet-size", "4", "--db", tmp_path / "s.db")
    assert result.exit_code == 2
    assert "notes.json" in one_error_line(result.stderr, result.output)
    assert not (tmp_path / "s.db").exists()


def test_non_json_file_through_the_real_cli(tmp_path: Path) -> None:
    bad = write(tmp_path / "notes.json", "\x00\x01 binary-ish, not json at all\n")
    proc = tg("history", "import", bad, "--fleet-size", "4", "--db", tmp_path / "s.db",
              cwd=tmp_path)
    assert proc.returncode == 2
    one_error_line(proc.stderr, proc.stdout)
    assert not (tmp_path / "s.db").exists()


def test_strict_with_a_refused_record_stores_nothing(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "20",
                    "--db", db, "--strict")
    assert result.exit_code == 1
    assert "refused 3" in flat(result.stdout) and "not stored" in result.stdout
    assert "--strict: 3 record(s) refused, nothing stored" in result.stderr
    assert not db.exists()
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "20",
                    "--db", db, "--strict", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["stored"] is False and len(doc["refused"]) == 3
    assert not db.exists()


def test_strict_without_refusals_stores(tmp_path: Path) -> None:
    clean = [e for line, e in enumerate(HBD_EVENTS, start=2) if line not in HBD_REFUSED_LINES]
    trace = write(tmp_path / "clean.json", "[\n" + ",\n".join(clean) + "\n]\n")
    doc = import_json(trace, "--time-unit", "days", "--fleet-size", "20",
                      "--db", tmp_path / "s.db", "--strict")
    assert doc["stored"] is True and doc["counts"]["refused"] == 0


def test_dry_run_stores_nothing(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "20",
                    "--db", db, "--dry-run")
    assert result.exit_code == 0
    assert "read 12 records" in flat(result.stdout) and "not stored" in result.stdout
    assert not db.exists()
    doc = import_json(trace, "--time-unit", "days", "--fleet-size", "20", "--db", db,
                      "--dry-run")
    assert doc["stored"] is False and doc["history_id"] is None
    assert {k: doc["counts"][k] for k in HBD_COUNTS} == HBD_COUNTS
    assert not db.exists()


def test_fleet_smaller_than_the_nodes_with_faults(tmp_path: Path) -> None:
    """Four nodes have faults: --fleet-size 3 is refused the same way with or without
    --dry-run, and no store is created for it."""
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    for extra in ((), ("--dry-run",)):
        result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "3",
                        "--db", db, *extra)
        assert result.exit_code == 2, (extra, result.output)
        line = one_error_line(result.stderr, result.output)
        assert "4 nodes have faults" in line and "--fleet-size" in line
        assert not db.exists()


def test_same_name_needs_replace_and_replace_replaces(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    import_json(trace, "--time-unit", "days", "--fleet-size", "20", "--db", db)
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "25",
                    "--db", db)
    assert result.exit_code == 2
    assert "--replace" in one_error_line(result.stderr, result.output)
    assert [h["fleet_size"] for h in listed(db)] == [20]
    again = import_json(trace, "--time-unit", "days", "--fleet-size", "25", "--db", db,
                        "--replace", "--window-end", "348")
    [history] = listed(db)
    assert history["fleet_size"] == 25 and history["id"] == again["history_id"]
    assert history["days"] == pytest.approx(348.0) and history["faults"] == 5


def test_delete(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    import_json(trace, "--time-unit", "days", "--fleet-size", "20", "--db", db, "--name", "a")
    import_json(trace, "--time-unit", "days", "--fleet-size", "20", "--db", db, "--name", "b")
    result = invoke("history", "delete", "a", "--db", db)
    assert result.exit_code == 0 and "deleted history a" in result.stdout
    assert [h["name"] for h in listed(db)] == ["b"]
    result = invoke("history", "delete", "a", "--db", db)
    assert result.exit_code == 2
    line = one_error_line(result.stderr, result.output)
    assert "'a'" in line and "b" in line


def test_delete_on_a_missing_store_creates_none(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    result = invoke("history", "delete", "a", "--db", db)
    assert result.exit_code == 2
    assert "no trainguard store" in one_error_line(result.stderr, result.output)
    assert not db.exists()


def test_list_on_a_missing_store_creates_none(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    for extra in ((), ("--json",)):
        result = invoke("history", "list", "--db", db, *extra)
        assert result.exit_code == 2
        assert "no trainguard store" in one_error_line(result.stderr, result.output)
        assert not db.exists()


# --- other layouts ------------------------------------------------------------------------------


def test_csv_with_a_strptime_format_and_a_zone(tmp_path: Path) -> None:
    trace = write(tmp_path / "tickets.csv",
                  "ticket;server;opened;closed;category\n"
                  "T1;gpu07;03.06.2024 08:15;03.06.2024 10:45;GPU\n"
                  "T2;gpu02;04.06.2024 23:50;05.06.2024 01:05;NIC\n"
                  "T3;gpu07;10.06.2024 14:00;10.06.2024 14:30;PSU\n")
    doc = import_json(trace, "--fleet-size", "8", "--node-field", "server",
                      "--start-field", "opened", "--end-field", "closed",
                      "--type-field", "category", "--time-format", "%d.%m.%Y %H:%M",
                      "--tz", "Europe/Berlin", "--db", tmp_path / "s.db")
    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2024, 6, 3, 8, 15, tzinfo=berlin).timestamp()
    last = datetime(2024, 6, 10, 14, 30, tzinfo=berlin).timestamp()
    assert doc["format"] == "csv" and doc["counts"]["faults"] == 3 and doc["refused"] == []
    assert doc["window"]["start"] == first and doc["window"]["end"] == last


def test_lanl_like_csv_with_type_labels(tmp_path: Path) -> None:
    trace = write(tmp_path / "lanl.csv",
                  "System,nodenum,Problem Started,Problem Fixed,Facilities,Hardware,Software\n"
                  "20,12,06/03/2004 08:15,06/03/2004 10:45,,Memory Dimm,\n"
                  "20,7,06/04/2004 23:50,06/05/2004 01:05,,,Kernel\n"
                  "20,12,06/10/2004 14:00,06/10/2004 14:30,Power Outage,,\n"
                  "20,31,06/12/2004 09:00,06/12/2004 16:00,,,\n"
                  "20,31,06/13/2004 09:00,06/12/2004 16:00,,CPU,\n")
    db = tmp_path / "s.db"
    doc = import_json(trace, "--fleet-size", "49", "--node-field", "nodenum",
                      "--start-field", "Problem Started", "--end-field", "Problem Fixed",
                      "--time-format", "%m/%d/%Y %H:%M", "--tz", "America/Denver",
                      "--type-field", "Facilities", "--type-field", "Hardware",
                      "--type-field", "Software", "--type-labels", "--db", db)
    assert doc["counts"]["faults"] == 4 and [r["line"] for r in doc["refused"]] == [6]
    assert "before it starts" in doc["refused"][0]["reason"]
    denver = ZoneInfo("America/Denver")
    assert doc["window"]["start"] == datetime(2004, 6, 3, 8, 15, tzinfo=denver).timestamp()
    fleet = invoke("fleet", "--db", db, "--no-plan", "--json", "--job-sizes", "8")
    assert fleet.exit_code == 0, fleet.output
    rates = json.loads(fleet.stdout)["fleet"]["rates"]
    kinds = {r["kind"]: r["faults"] for r in rates["by_kind"]}
    assert kinds == {"Hardware / Memory Dimm": 1, "Software / Kernel": 1,
                     "Facilities / Power Outage": 1, "unknown": 1}
    categories = {r["category"] for r in rates["by_category"]}
    assert categories == {"Hardware", "Software", "Facilities", "unknown"}


def test_json_lines_with_iso_times_and_minutes(tmp_path: Path) -> None:
    trace = write(tmp_path / "log.jsonl",
                  '{"host": "g1", "at": "2025-01-06T10:00:00Z", "mins": 90, "kind": "nvlink"}\n'
                  '{"host": "g2", "at": "2025-01-06T11:30:00+01:00", "mins": 15, "kind": "xid"}\n'
                  "\n"
                  '{"host": "g1", "at": "2025-01-08T00:00:00", "mins": 240, "kind": "psu"}\n'
                  '{"host": "g3", "at": "2025-01-09T06:00:00Z", "mins": -5, "kind": "nic"}\n')
    db = tmp_path / "s.db"
    doc = import_json(trace, "--fleet-size", "4", "--start-field", "at",
                      "--duration-field", "mins", "--duration-unit", "minutes", "--db", db)
    assert doc["format"] == "jsonl"
    assert doc["counts"]["faults"] == 3 and [r["line"] for r in doc["refused"]] == [5]
    assert "negative duration" in doc["refused"][0]["reason"]
    start = datetime.fromisoformat("2025-01-06T10:00:00+00:00").timestamp()
    end = datetime.fromisoformat("2025-01-08T00:00:00+00:00").timestamp() + 240 * 60
    assert (doc["window"]["start"], doc["window"]["end"]) == (start, end)
    fleet = json.loads(invoke("fleet", "--db", db, "--no-plan", "--json").stdout)["fleet"]
    repairs = sorted(x["duration_s"] for x in fleet["repairs"]["longest"])
    assert repairs == [15 * 60.0, 90 * 60.0, 240 * 60.0]


def test_a_mapping_file_maps_some_types(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    mapping = write(tmp_path / "map.toml", HBD_MAP)
    db = tmp_path / "s.db"
    args = (trace, "--time-unit", "days", "--fleet-size", "20", "--map", mapping, "--db", db)
    result = invoke("history", "import", *args, "--dry-run")
    assert result.exit_code == 0, result.output
    # a1 xid, f6 xid -> gpu; d4 DBE -> memory-ecc; c3's Link Down and Kubelet stay as given
    assert "3 of 5 faults mapped by map.toml" in flat(result.stdout)
    doc = import_json(*args)
    assert doc["counts"]["mapped"] == 3
    fleet = json.loads(invoke("fleet", "--db", db, "--no-plan", "--json").stdout)["fleet"]
    categories = {r["category"]: r["faults"] for r in fleet["rates"]["by_category"]}
    assert categories == {"gpu": 2, "memory-ecc": 1, "Hardware Failure": 1,
                          "Software Failure": 1}


@pytest.mark.parametrize(("text", "where"), [
    ('[[map]]\npattern = "a*"\ncategory = "gpu"\n\n[[map]]\npattern = "b*"\n'
     'category = "gpus"\n', "rule 2 (line 5)"),
    ('[[map]]\npattern = "a*"\ncategory = gpu\n', "line 3"),
], ids=["bad-category", "not-toml"])
def test_a_bad_mapping_file_names_the_line(tmp_path: Path, text: str, where: str) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    mapping = write(tmp_path / "map.toml", text)
    db = tmp_path / "s.db"
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "20",
                    "--map", mapping, "--db", db)
    assert result.exit_code == 2
    line = one_error_line(result.stderr, result.output)
    assert "map.toml" in line and where in line
    assert not db.exists()


# --- the window ---------------------------------------------------------------------------------


def test_window_defaults_relative_to_the_origin(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    doc = import_json(trace, "--time-unit", "days", "--fleet-size", "20", "--dry-run",
                      "--origin", "2024-03-30", "--db", tmp_path / "s.db")
    origin = datetime.fromisoformat("2024-03-30T00:00:00+00:00").timestamp()
    assert doc["window"] == {"start": origin, "end": origin + 10 * DAY,
                             "days": pytest.approx(10.0)}


def test_window_defaults_absolute_from_the_first_event(tmp_path: Path) -> None:
    trace = write(tmp_path / "abs.jsonl",
                  '{"node": "a", "start": "2024-05-02T00:00:00Z", "end": "2024-05-02T06:00:00Z"}\n'
                  '{"node": "b", "start": "2024-05-05T00:00:00Z", "end": "2024-05-06T12:00:00Z"}\n')
    doc = import_json(trace, "--fleet-size", "3", "--dry-run", "--db", tmp_path / "s.db")
    first = datetime.fromisoformat("2024-05-02T00:00:00+00:00").timestamp()
    assert doc["window"] == {"start": first, "end": first + 4.5 * DAY,
                             "days": pytest.approx(4.5)}


def test_window_end_348_days(tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    doc = import_json(trace, "--time-unit", "days", "--fleet-size", "20",
                      "--window-end", "348", "--db", db)
    assert doc["window"] == {"start": 0.0, "end": 348 * DAY, "days": pytest.approx(348.0)}
    [history] = listed(db)
    assert history["days"] == pytest.approx(348.0)
    fleet = json.loads(invoke("fleet", "--db", db, "--no-plan", "--json").stdout)
    assert fleet["window"]["node_days"] == pytest.approx(20 * 348.0)
    assert fleet["fleet"]["counts"]["faults"] == 5


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--window-end", "9", "a later --window-end"),
    ("--window-start", "4", "an earlier --window-start"),
    ("--window-end", "next year", "--window-end 'next year'"),
])
def test_a_window_that_excludes_events(tmp_path: Path, option: str, value: str,
                                       says: str) -> None:
    trace = write(tmp_path / "trace.json", HBD_JSON)
    db = tmp_path / "s.db"
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "20",
                    option, value, "--db", db)
    assert result.exit_code == 2
    assert says in one_error_line(result.stderr, result.output)
    assert not db.exists()


def test_a_fault_starting_at_the_window_end_is_flagged(tmp_path: Path) -> None:
    """The window is half-open: a fault that starts at its end is not one of its faults. With
    the default end (the last event) that is a fault still open at the end of the file: the
    import says so on stderr (the JSON on stdout stays one object)."""
    trace = write(tmp_path / "tail.jsonl",
                  '{"node": "a", "start": 1, "end": 2, "type": "GPU"}\n'
                  '{"node": "b", "start": 3, "end": "", "type": "NIC"}\n')
    db = tmp_path / "s.db"
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "4",
                    "--db", db, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["faults"] == 2
    assert "1 fault starts at the window's end" in result.stderr
    assert "--window-end" in result.stderr
    result = invoke("history", "import", trace, "--time-unit", "days", "--fleet-size", "4",
                    "--db", db, "--replace", "--window-end", "5")
    assert result.exit_code == 0 and "window's end" not in result.stderr
    fleet = json.loads(invoke("fleet", "--db", db, "--no-plan", "--json").stdout)
    assert fleet["fleet"]["counts"]["faults"] == 2 and fleet["fleet"]["counts"]["open"] == 1


def test_standard_input_and_the_next_command(tmp_path: Path) -> None:
    """``-`` reads the file from standard input; the hint names the history as a shell word
    (a name with markup or spaces is printed as given)."""
    db = tmp_path / "s.db"
    result = invoke("history", "import", "-", "--time-unit", "days", "--fleet-size", "20",
                    "--db", db, input=HBD_JSON)
    assert result.exit_code == 0, result.output
    assert "next: trainguard fleet --history stdin" in result.stdout
    result = invoke("history", "import", "-", "--time-unit", "days", "--fleet-size", "20",
                    "--db", db, "--name", "[bold]rack 4", input=HBD_JSON)
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    assert text.startswith("[bold]rack 4: read 12 records") and "\\" not in text
    assert "next: trainguard fleet --history '[bold]rack 4'" in text
    assert [h["name"] for h in listed(db)] == ["[bold]rack 4", "stdin"]
    assert all(h["source"] == "<stdin>" and h["faults"] == 5 for h in listed(db))


def test_refusals_are_printed_as_read(tmp_path: Path) -> None:
    """Node names and values are data, not markup: printed as they are (no added escapes)."""
    trace = write(tmp_path / "odd.jsonl",
                  '{"node": "[gpu]a", "start": 1, "end": 2}\n'
                  '{"node": "[gpu]a", "start": 1.5, "end": 3}\n')
    result = invoke("history", "import", trace, "--time-unit", "h", "--fleet-size", "2",
                    "--db", tmp_path / "s.db")
    assert result.exit_code == 0, result.output
    [line] = [x for x in result.stdout.splitlines() if "refused line" in x]
    assert line.strip() == "refused line 2: fault of node [gpu]a ('unknown') overlaps the one " \
        "at line 1"
    result = invoke("history", "delete", "odd.jsonl", "--db", tmp_path / "s.db")
    assert result.stdout.strip() == "deleted history odd.jsonl (1 fault)"
