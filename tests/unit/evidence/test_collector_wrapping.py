"""A log read through a collector reads as the program wrote it (issue #30, general mechanism):
ANSI colour sequences, a collector's per-line prefix before a Python traceback (a time stamp,
Ray's worker tag, docker compose's service column, a quoting ``> ``), ``kubectl logs --prefix``
and Docker's json-file records. The last test holds the mechanism to its promise on the
development corpus: every wrapping gives the same first incident as the bare log."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from rule_forms import scan_lines

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.tracebacks import collector_prefix, find_exception_line
from trainguard.evidence.unwrap import unwrap_line
from trainguard.textsafe import strip_escapes

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 88, in <module>',
    "    main(cfg)",
    '  File "/app/train.py", line 61, in main',
    "    model = build(cfg.model_name)",
    "KeyError: 'llama-7b'",
]


def _incident(tmp_path: Path, lines: list[str]) -> tuple[str, str]:
    _, incidents = scan_lines(tmp_path, lines, suspicious=True)
    return (incidents[0].category.value, incidents[0].root_cause.signature) if incidents \
        else ("none", "")


# ---------------------------------------------------------------------- ANSI colour -----------
def test_escape_sequences_go_and_the_text_stays() -> None:
    assert strip_escapes("\x1b[1;31mERROR\x1b[0m rank 3\x1b[K") == "ERROR rank 3"
    assert strip_escapes("\x1b]0;title\x07Killed") == "Killed"
    assert strip_escapes("plain \u00e9 text") == "plain \u00e9 text"


def test_evidence_keeps_the_coloured_line_as_read(tmp_path: Path) -> None:
    line = "\x1b[31mRuntimeError: CUDA error: an illegal memory access was encountered\x1b[0m"
    events, _ = scan_lines(tmp_path, [line])
    assert events[0].evidence[0].text == line
    assert events[0].evidence[0].program_text == line[5:-4]


def test_a_coloured_kill_line_is_read(tmp_path: Path) -> None:
    # `Killed` alone on its line (the shell's report) is anchored; the colour codes hid it.
    assert _incident(tmp_path, ["step 10 loss 2.1", "\x1b[31mKilled\x1b[0m"]) == \
        ("oom_host", "process_killed_sigkill")


def test_a_coloured_traceback_is_read_to_its_exception(tmp_path: Path) -> None:
    lines = [f"\x1b[31m{line}\x1b[0m" for line in TRACEBACK]
    assert _incident(tmp_path, lines) == ("user_code_error", "python_exception")


# ---------------------------------------------------------------------- collector prefixes ----
PREFIXES: dict[str, Callable[[int], str]] = {
    "timestamp": lambda i: f"2026-03-03T04:12:{10 + i:02d}.{i * 7919 % 1000000:06d}Z ",
    "ray": lambda i: "(RayTrainWorker pid=41233, ip=10.1.2.3) ",
    "compose": lambda i: "trainer-1  | ",
    "quote": lambda i: "> ",
}


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_a_traceback_under_a_collector_prefix_ends_at_its_exception(name: str) -> None:
    prefix = PREFIXES[name]
    lines = [prefix(i) + line for i, line in enumerate(TRACEBACK)]
    found = find_exception_line(lines[0], lines[1:])
    assert found is not None
    assert found.exc_type == "KeyError"
    assert found.last_frame == "/app/train.py:61 in main"


def test_another_sources_lines_do_not_end_the_traceback() -> None:
    mine = "(RayTrainWorker pid=41233, ip=10.1.2.3) "
    other = "(RayTrainWorker pid=577, ip=10.1.2.4) "
    lines = [mine + TRACEBACK[0], mine + TRACEBACK[1],
             other + "ValueError: this worker's own trouble", *(mine + t for t in TRACEBACK[2:])]
    found = find_exception_line(lines[0], lines[1:])
    assert found is not None and found.exc_type == "KeyError"


def test_a_logger_header_whose_frames_carry_no_prefix_is_read_as_before() -> None:
    header = "2026-03-03 04:12:55,123 ERROR trainer: " + TRACEBACK[0]
    assert collector_prefix(header) == "2026-03-03 04:12:55,123 ERROR trainer:"
    found = find_exception_line(header, TRACEBACK[1:])
    assert found is not None and found.exc_type == "KeyError"


def test_a_launchers_rank_prefix_is_still_the_rank_reader() -> None:
    assert collector_prefix("[rank3]: " + TRACEBACK[0]) == ""
    assert collector_prefix(TRACEBACK[0]) == ""


# ---------------------------------------------------------------------- kubectl / docker -------
def test_kubectl_prefix_is_the_collectors_not_the_programs() -> None:
    assert unwrap_line("[pod/trainer-worker-0/pytorch] RuntimeError: boom") == \
        "RuntimeError: boom"
    assert unwrap_line("[pod/x] not kubectl's form") == "[pod/x] not kubectl's form"


def test_docker_json_file_record_keeps_its_time(tmp_path: Path) -> None:
    record = json.dumps({"log": "RuntimeError: CUDA error: an illegal memory access was "
                                "encountered\n", "stream": "stderr",
                         "time": "2026-03-03T04:12:55.123456789Z"}, separators=(",", ":"))
    assert unwrap_line(record).startswith("2026-03-03T04:12:55.123456789Z RuntimeError")
    events, _ = scan_lines(tmp_path, [record])
    assert events and events[0].time is not None
    assert abs(events[0].time - 1772511175.123456) < 1e-3
    assert unwrap_line('{"log": broken') == '{"log": broken'
    # A coloured line inside a record: JSON escapes the colour codes, unwrapping drops them.
    coloured = json.dumps({"log": "\x1b[31mKilled\x1b[0m\n", "time": "2026-03-03T04:12:55Z"})
    assert unwrap_line(coloured) == "2026-03-03T04:12:55Z Killed"


# ---------------------------------------------------------------------- the promise -----------
DEV = Path(__file__).resolve().parents[2] / "data" / "realworld"
WRAPPINGS: dict[str, Callable[[int, str], str]] = {
    "ansi": lambda i, line: f"\x1b[3{i % 7}m{line}\x1b[0m",
    "timestamp": lambda i, line: f"2026-03-03T04:{i // 60 % 60:02d}:{i % 60:02d}.{i:06d}Z {line}",
    "ray": lambda i, line: f"(RayTrainWorker pid=41233, ip=10.1.2.3) {line}",
    "compose": lambda i, line: f"trainer-1  | {line}",
    "kubectl": lambda i, line: f"[pod/trainer-worker-1/pytorch] {line}",
    "docker": lambda i, line: json.dumps(
        {"log": line + "\n", "stream": "stderr", "time": f"2026-03-03T04:12:{i % 60:02d}Z"},
        separators=(",", ":")),
}


@cache
def _bare(path: Path) -> tuple[str, str]:
    return _first(path)


def _first(path: Path) -> tuple[str, str]:
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    incidents = correlate(events, rules)
    return (incidents[0].category.value, incidents[0].action.value) if incidents else \
        ("unknown", "none")


@pytest.mark.parametrize("name", sorted(WRAPPINGS))
def test_wrapping_leaves_the_first_incident_of_every_dev_case_unchanged(
        tmp_path: Path, name: str) -> None:
    wrap = WRAPPINGS[name]
    labels = [json.loads(x) for x in (DEV / "labels.jsonl").read_text().splitlines() if x]
    changed = []
    for lab in labels[::3]:
        case = DEV / lab["file"]
        lines = case.read_text(encoding="utf-8", errors="replace").splitlines()
        wrapped = tmp_path / f"wrapped{case.suffix}"
        wrapped.write_text("".join(wrap(i, line) + "\n" for i, line in enumerate(lines)),
                           encoding="utf-8")
        if _bare(case) != _first(wrapped):
            changed.append(lab["file"])
    assert changed == []
