"""A calibrated ``unknown``: failure words no signature explains, with their lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.suspicion import STRONG_CONFIDENCE, WEAK_CONFIDENCE, suspicion
from trainguard.taxonomy import Category, Severity

SUSPICIOUS = ScanOptions(suspicious_lines=True, default_year=2024)


@pytest.mark.parametrize(
    ("line", "words", "confidence"),
    [
        ("[2024-05-01 10:00:00] worker 3: fatal: lost connection to the parameter service",
         ("fatal", "lost"), STRONG_CONFIDENCE),
        ("trainer exited: job was killed", ("killed",), STRONG_CONFIDENCE),
        ("ERROR 2024-05-01 upload of shard 7 failed, retrying", ("error", "failed"),
         WEAK_CONFIDENCE),
        ("grpc: request timed out after 30s", ("timed out",), WEAK_CONFIDENCE),
        # A dot that ends the sentence does not make the word a file name or an identifier.
        ("Loading checkpoint shards:  97%| 29/30 [00:35<00:01,  1.39s/it]Killed.", ("killed",),
         STRONG_CONFIDENCE),
        ("*** Your MPI job will now abort.", ("abort",), STRONG_CONFIDENCE),
        ("upload failed... retrying in 5s", ("failed",), WEAK_CONFIDENCE),
    ],
)
def test_failure_words_and_their_confidence(line: str, words: tuple[str, ...],
                                            confidence: float) -> None:
    found = suspicion(line)
    assert found is not None
    assert found.words == words
    assert found.confidence == confidence


@pytest.mark.parametrize(
    "line",
    [
        "step 1200 | loss 2.31 | 0 errors | lr 3e-4",
        "validation finished: no failures",
        "stats: errors=0 timeouts=0",
        "  error_file: <N/A>",
        "export NCCL_IB_TIMEOUT=22",
        "loaded /data/failed.txt",
        "wrote /data/errors.2024.log",
        "  File \"x.py\", line 3, in read: struct.error.args",
        "step 10 | loss 2.1 | tokens/s 51234",
    ],
)
def test_counted_zero_phrases_and_identifiers_are_not_suspicious(line: str) -> None:
    assert suspicion(line) is None


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_a_log_no_signature_explains_is_an_unknown_incident_with_its_lines(
        tmp_path: Path) -> None:
    log = _write(tmp_path / "train.log", [
        "[2024-05-01 10:00:00] step 1200 | loss 2.31",
        "[2024-05-01 10:00:05] data service: shard server unreachable, giving up",
        "[2024-05-01 10:00:06] step 1201 | loss 2.30",
        "[2024-05-01 10:00:07] worker 3: fatal: lost connection to the parameter service",
    ])
    rules = load_rules()
    events, _ = scan_paths([str(log)], rules, SUSPICIOUS)

    incidents = correlate(events, rules)

    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.root_cause.category is Category.UNKNOWN and inc.suspicious
    assert inc.category is Category.UNKNOWN or inc.inferred  # a model's answer is marked
    assert inc.root_cause.confidence == STRONG_CONFIDENCE
    assert [e.line_no for e in inc.suspicious_lines] == [2, 4]
    assert inc.to_dict()["suspicious_lines"][1]["text"].endswith("parameter service")


def test_without_the_option_failure_words_make_no_events(tmp_path: Path) -> None:
    # The supervisor and the kernel-log tailer scan without it: nothing changes for them.
    log = _write(tmp_path / "train.log", ["worker 3: fatal: lost connection to the server"])
    events, _ = scan_paths([str(log)], load_rules())
    assert events == []


def test_a_known_signature_wins_and_keeps_its_start(tmp_path: Path) -> None:
    log = _write(tmp_path / "train.log", [
        "[2024-05-01 09:50:00] prefetch of shard 7 failed, retrying",
        "[2024-05-01 10:00:00] [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB.",
        "[2024-05-01 10:00:01] job failed",
    ])
    rules = load_rules()
    events, _ = scan_paths([str(log)], rules, SUSPICIOUS)

    incidents = correlate(events, rules)

    assert [i.category for i in incidents] == [Category.OOM_GPU]
    inc = incidents[0]
    assert inc.suspicious_lines == ()
    assert inc.start == inc.root_cause.time
    assert {e.severity for e in inc.related} == {Severity.INFO}


def test_failure_words_after_a_chunk_boundary_newline_are_found(tmp_path: Path) -> None:
    # The prefilter runs over whole chunks: a word's context must not swallow the line end.
    log = _write(tmp_path / "a.log", ["Summoning checkpoint.", "Killed"])
    events, _ = scan_paths([str(log)], load_rules(), SUSPICIOUS)
    assert [(e.signature, e.evidence[0].line_no) for e in events] == [
        ("process_killed_sigkill", 2)]


def test_cli_shows_unknown_with_confidence_and_the_suspicious_line(tmp_path: Path) -> None:
    log = _write(tmp_path / "train.log", [
        "[2024-05-01 10:00:07] worker 3: fatal: lost connection to the parameter service"])
    runner = CliRunner()

    table = runner.invoke(app, ["logs", "classify", str(log)])
    as_json = runner.invoke(app, ["logs", "classify", "--json", str(log)])

    assert table.exit_code == 0, table.output
    assert "unknown" in table.output
    assert f"{STRONG_CONFIDENCE:.2f}" in table.output
    assert "parameter service" in table.output
    row = json.loads(as_json.stdout.splitlines()[0])
    assert row["root_cause"]["category"] == "unknown"
    guess = row["inferred_category"]
    assert row["category"] == (guess["category"] if row["inferred"] else "unknown")
    assert row["confidence"] == STRONG_CONFIDENCE
    assert row["suspicious_lines"][0]["line"] == 1
