"""`trainguard history import` on other operators' layouts, with the options an operator would
pass and no more: LANL's 1996-2005 failure CSV (a node named by system and node number, blame
columns, ``mm/dd/yyyy hh:mm`` times), a ticket-system export found with no field option at all,
and a JSON-lines export with epoch-millisecond times. The faults stored are read back from the
store. Rows are made up, in the sources' published layouts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from trainguard.cli.main import app
from trainguard.fleet.events import FaultEvent
from trainguard.store import Store

runner = CliRunner()
BLAME = ("Facilities", "Hardware", "Human Error", "Network", "Undetermined", "Software")

# LANL's columns (LA-UR-05-7318), as the CFDR README names them.
LANL_HEADER = ("System,machine type,nodes,procs per node,procs in system,node number,"
               "node install,node prod,node decom,fru type,mem,cputype,memtype,num intercon,"
               "purpose,Prob Started (mm/dd/yy hh:mm),Prob Fixed (mm/dd/yy hh:mm),Down Time,"
               "Facilities,Hardware,Human Error,Network,Undetermined,Software,Same Event")
# The same file as the ESEUR copy spells its header.
ESEUR_HEADER = ("System,machine type,nodes,procstot,procsinnode,node number,nodenumz,"
                "node install,node prod,node decom,fru type,mem,cputype,memtype,num intercon,"
                "purpose,Prob Started,Prob Fixed,Down Time,Facilities,Hardware,Human Error,"
                "Network,Undetermined,Software,Same Event")
_MACHINE = {"20": ("cluster", "512", "2048", "4"), "2": ("cluster", "49", "6152", "80")}


def _lanl_row(system: str, node: str, started: str, fixed: str, down: str, blame: str,
              text: str) -> dict[int, str]:
    """A row by column position in :data:`LANL_HEADER` (the ESEUR header has ``nodenumz``
    after ``node number``)."""
    machine, nodes, total, per_node = _MACHINE[system]
    cells = [system, machine, nodes, per_node, total, node, "5-Apr", "5-Jun", "current", "part",
             "80", "1", "1", "0", "compute", started, fixed, down]
    cells += [text if column == blame else "" for column in BLAME] + ["No"]
    return dict(enumerate(cells))


def _lanl_csv(header: str, rows: list[dict[int, str]]) -> str:
    eseur = header == ESEUR_HEADER
    lines = [header]
    for row in rows:
        cells = [row[i] for i in range(len(row))]
        if eseur:
            cells.insert(6, cells[5])
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


# Node number 15 is in both systems, at overlapping times, with the same kind of fault.
LANL_ROWS = [
    _lanl_row("20", "15", "06/10/2003 10:54", "06/10/2003 11:00", "6", "Hardware",
              "Graphics Accel Hdwr"),
    _lanl_row("2", "15", "06/10/2003 10:30", "06/10/2003 12:00", "90", "Hardware",
              "Graphics Accel Hdwr"),
    _lanl_row("20", "3", "6/21/2005 10:54", "6/21/2005 11:00", "6", "Human Error", "Operator"),
    _lanl_row("2", "7", "12/31/2004 23:30", "01/01/2005 01:15", "105", "Network", "Network"),
    _lanl_row("20", "15", "07/01/2003 08:00", "07/03/2003 08:00", "2880", "Software",
              "Kernel software"),
    _lanl_row("20", "4", "03/02/2004 16:45", "03/02/2004 16:40", "", "Facilities",
              "Power Outage"),
]


def _utc(text: str) -> float:
    return datetime.strptime(text, "%m/%d/%Y %H:%M").replace(tzinfo=UTC).timestamp()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def import_json(*args: str | Path) -> dict[str, Any]:
    result = invoke("history", "import", *args, "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def stored(db: Path) -> list[FaultEvent]:
    with Store.open(str(db)) as store:
        return store.history_events(store.fault_history(None).id)


def one_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return " ".join(result.stderr.split())


def lanl_args(trace: Path, db: Path) -> list[str | Path]:
    args: list[str | Path] = [trace, "--fleet-size", "64", "--node-field", "System",
                              "--node-field", "node number", "--time-format", "%m/%d/%Y %H:%M",
                              "--type-labels", "--db", db]
    for column in BLAME:
        args += ["--type-field", column]
    return args


@pytest.mark.parametrize("header", [LANL_HEADER, ESEUR_HEADER], ids=["cfdr", "eseur"])
def test_lanl_failure_data(tmp_path: Path, header: str) -> None:
    trace = tmp_path / "LA-UR-05-7318-failure-data-1996-2005.csv"
    trace.write_text(_lanl_csv(header, LANL_ROWS), encoding="utf-8")
    db = tmp_path / "s.db"
    doc = import_json(*lanl_args(trace, db))
    assert doc["format"] == "csv"
    assert doc["counts"]["faults"] == 5 and doc["counts"]["open_faults"] == 0
    assert [r["line"] for r in doc["refused"]] == [7]
    assert "ends (03/02/2004 16:40) before it starts" in doc["refused"][0]["reason"]
    got = sorted((e.node, e.kind, e.category, e.start, e.duration_s) for e in stored(db))
    assert got == [
        ("2/15", "Hardware / Graphics Accel Hdwr", "Hardware", _utc("06/10/2003 10:30"),
         90 * 60.0),
        ("2/7", "Network", "Network", _utc("12/31/2004 23:30"), 105 * 60.0),
        ("20/15", "Hardware / Graphics Accel Hdwr", "Hardware", _utc("06/10/2003 10:54"),
         6 * 60.0),
        ("20/15", "Software / Kernel software", "Software", _utc("07/01/2003 08:00"),
         2880 * 60.0),
        ("20/3", "Human Error / Operator", "Human Error", _utc("06/21/2005 10:54"), 6 * 60.0),
    ]


def test_the_fields_read_are_printed(tmp_path: Path) -> None:
    trace = tmp_path / "lanl.csv"
    trace.write_text(_lanl_csv(LANL_HEADER, LANL_ROWS), encoding="utf-8")
    result = invoke("history", "import", *lanl_args(trace, tmp_path / "s.db"), "--dry-run")
    assert result.exit_code == 0, result.output
    [line] = [x.strip() for x in result.stdout.splitlines() if "fields:" in x]
    assert line == ("fields: node 'System' + 'node number', start 'Prob Started (mm/dd/yy "
                    "hh:mm)', end 'Prob Fixed (mm/dd/yy hh:mm)', type " + " / ".join(
                        repr(b) for b in BLAME))
    trace.write_text("host,start,duration_min\nn1,2024-01-01T00:00:00Z,15\n", encoding="utf-8")
    result = invoke("history", "import", trace, "--fleet-size", "2", "--dry-run")
    assert "fields: node 'host', start 'start', duration 'duration_min' in min, type none " \
           "(unknown)" in result.stdout


def test_lanl_with_the_node_number_alone_merges_systems_and_says_so(tmp_path: Path) -> None:
    trace = tmp_path / "lanl.csv"
    trace.write_text(_lanl_csv(LANL_HEADER, LANL_ROWS), encoding="utf-8")
    args = lanl_args(trace, tmp_path / "s.db")
    args.remove("System")
    args.remove("--node-field")
    doc = import_json(*args, "--dry-run")
    reasons = [r["reason"] for r in doc["refused"] if r["line"] == 3]
    assert len(reasons) == 1 and "overlaps" in reasons[0]


def test_lanl_down_time_read_where_prob_fixed_is_missing(tmp_path: Path) -> None:
    rows = [_lanl_row("20", "15", "06/10/2003 10:54", "", "6", "Hardware", "Memory Dimm")]
    trace = tmp_path / "lanl.csv"
    trace.write_text(_lanl_csv(LANL_HEADER, rows), encoding="utf-8")
    db = tmp_path / "s.db"
    base = lanl_args(trace, db)
    # the end is found (Prob Fixed); Down Time is read only when asked for, in a unit said
    doc = import_json(*base, "--dry-run", "--window-end", "06/30/2003 00:00")
    assert doc["counts"]["open_faults"] == 1
    missing = invoke("history", "import", *base, "--end-field", "Prob Fixed",
                     "--duration-field", "Down Time")
    assert "'Down Time' does not say its unit: pass --duration-unit" in one_error(missing)
    doc = import_json(*base, "--end-field", "Prob Fixed", "--duration-field", "Down Time",
                      "--duration-unit", "minutes")
    assert doc["counts"]["open_faults"] == 0
    assert [e.duration_s for e in stored(db)] == [6 * 60.0]


TICKETS = """\
number,hostname,opened_at,resolved_at,category,subcategory,short_description
INC0001,gpu-a07,2024-06-03T08:15:00+02:00,2024-06-03T10:45:00+02:00,Hardware,GPU,Xid 79
INC0002,gpu-b02,2024-06-04T23:50:00Z,2024-06-05T01:05:00Z,Network,NIC,"link flaps, port 3"
INC0003,gpu-a07,2024-06-10T14:00:00-05:00,,Hardware,PSU,PSU 2 failed
INC0004,gpu-c11,2024-06-11T09:00:00+08:00,2024-06-11T08:00:00+08:00,Software,Driver,reinstall
"""


def test_ticket_export_needs_no_field_option(tmp_path: Path) -> None:
    trace = tmp_path / "incidents.csv"
    trace.write_text(TICKETS, encoding="utf-8")
    db = tmp_path / "s.db"
    doc = import_json(trace, "--fleet-size", "32", "--db", db)
    assert doc["fields"] == {"node": ["hostname"], "time": None, "start": "opened_at",
                             "end": "resolved_at", "duration": None, "duration_unit": None,
                             "event": None, "type_fields": ["category", "subcategory"]}
    assert doc["counts"]["faults"] == 3 and doc["counts"]["open_faults"] == 1
    assert [r["line"] for r in doc["refused"]] == [5]
    iso = datetime.fromisoformat
    got = sorted((e.node, e.kind, e.category, e.start, e.end) for e in stored(db))
    assert got == [
        ("gpu-a07", "Hardware / GPU", "Hardware", iso("2024-06-03T06:15:00+00:00").timestamp(),
         iso("2024-06-03T08:45:00+00:00").timestamp()),
        ("gpu-a07", "Hardware / PSU", "Hardware", iso("2024-06-10T19:00:00+00:00").timestamp(),
         None),
        ("gpu-b02", "Network / NIC", "Network", iso("2024-06-04T23:50:00+00:00").timestamp(),
         iso("2024-06-05T01:05:00+00:00").timestamp()),
    ]


def test_two_fields_that_could_be_one_stop_naming_both(tmp_path: Path) -> None:
    trace = tmp_path / "incidents.csv"
    lines = TICKETS.splitlines()
    trace.write_text("\n".join([lines[0] + ",closed_at"] + [row + "," for row in lines[1:]]),
                     encoding="utf-8")
    message = one_error(invoke("history", "import", trace, "--fleet-size", "32", "--db",
                               tmp_path / "s.db"))
    assert "the fields 'resolved_at' and 'closed_at' could each be the end field: pass " \
           "--end-field" in message
    assert not (tmp_path / "s.db").exists()
    doc = import_json(trace, "--fleet-size", "32", "--end-field", "resolved_at",
                      "--db", tmp_path / "s.db")
    assert doc["counts"]["faults"] == 3


EPOCH_MS = [
    {"nodeName": "h100-017", "startedAt": 1717400000000, "endedAt": 1717403600000,
     "failureType": "gpu_xid"},
    {"nodeName": "h100-003", "startedAt": 1717405000000, "endedAt": None,
     "failureType": "ib_link"},
    {"nodeName": "h100-017", "startedAt": "1717500000500", "endedAt": "1717500900500",
     "failureType": "ecc"},
]


def test_json_lines_with_epoch_milliseconds(tmp_path: Path) -> None:
    trace = tmp_path / "faults.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in EPOCH_MS), encoding="utf-8")
    db = tmp_path / "s.db"
    plain = invoke("history", "import", trace, "--fleet-size", "8", "--db", db)
    assert "no usable fault: all 3 record(s) refused; the first, line 1: start (field " \
           "'startedAt'): 1717400000000 is too large for unix seconds (the year 5138 or " \
           "later): pass --epoch-unit ms" in one_error(plain)
    assert not db.exists()
    doc = import_json(trace, "--fleet-size", "8", "--epoch-unit", "ms", "--db", db)
    assert doc["counts"]["faults"] == 3 and doc["refused"] == []
    assert (doc["window"]["start"], doc["window"]["end"]) == (1717400000.0, 1717500900.5)
    got = sorted((e.node, e.kind, e.start, e.end) for e in stored(db))
    assert got == [("h100-003", "ib_link", 1717405000.0, None),
                   ("h100-017", "ecc", 1717500000.5, 1717500900.5),
                   ("h100-017", "gpu_xid", 1717400000.0, 1717403600.0)]


@pytest.mark.parametrize(("header", "unit", "expected"), [
    ("duration_min", None, 15 * 60.0),
    ("Down Time (minutes)", "minutes", 15 * 60.0),
    ("ttr", "h", 15 * 3600.0),
])
def test_a_duration_field_in_the_unit_its_name_or_the_option_says(
        tmp_path: Path, header: str, unit: str | None, expected: float) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(f"host,start,{header}\nn1,2024-01-01T00:00:00Z,15\n", encoding="utf-8")
    db = tmp_path / "s.db"
    doc = import_json(trace, "--fleet-size", "2", "--db", db,
                      *(("--duration-unit", unit) if unit else ()))
    assert doc["counts"]["faults"] == 1
    assert [e.duration_s for e in stored(db)] == [expected]


def test_a_duration_unit_the_field_name_contradicts_stops(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("host,start,duration_min\nn1,2024-01-01T00:00:00Z,15\n", encoding="utf-8")
    message = one_error(invoke("history", "import", trace, "--fleet-size", "2",
                               "--duration-unit", "s", "--db", tmp_path / "s.db"))
    assert "the duration field 'duration_min' says min but --duration-unit is s: pass " \
           "--duration-unit min" in message
