"""Kernel-log ground truth without a year (`--year`, or a guess that is said out loud) and
failures outside the telemetry's time span (counted and shown, never silently dropped)."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trainguard.detect.truth import (
    Failure,
    GroundTruth,
    read_kernel_log_truth,
    truth_from_kernel_logs,
)
from trainguard.detect.truthspan import check_span
from trainguard.errors import ConfigError

SYSLOG = (
    "Nov 18 03:12:01 gpu-a07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, "
    "GPU has fallen off the bus.\n"
    "Nov 18 09:40:00 gpu-a07 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python3, "
    "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.\n")


def _t(year: int, hour: int, minute: int, second: int = 0) -> float:
    return datetime(year, 11, 18, hour, minute, second, tzinfo=UTC).timestamp()


def _log(tmp_path: Path, text: str = SYSLOG, mtime_year: int = 2026) -> Path:
    path = tmp_path / "gpu-a07.log"
    path.write_text(text)
    mtime = datetime(mtime_year, 12, 1, tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    return path


@pytest.mark.parametrize("year", [2023, 2024, 2027])
def test_year_dates_syslog_lines_exactly(tmp_path: Path, year: int) -> None:
    # The file's mtime (2026) does not move a given year, not even a "future" one.
    found = read_kernel_log_truth([_log(tmp_path)], year=year)
    assert [(f.node, f.time, f.xid) for f in found.truth.failures] == [
        ("gpu-a07", _t(year, 3, 12, 1), 79), ("gpu-a07", _t(year, 9, 40), 48)]
    assert found.yearless == 2
    assert found.year_note is None


@pytest.mark.parametrize(("mtime_year", "guessed"), [(2026, 2026), (2022, 2022)])
def test_a_guessed_year_is_said_once(tmp_path: Path, mtime_year: int, guessed: int) -> None:
    found = read_kernel_log_truth([_log(tmp_path, mtime_year=mtime_year)])
    assert [f.time for f in found.truth.failures] == [_t(guessed, 3, 12, 1), _t(guessed, 9, 40)]
    assert found.guessed_years == (guessed,)
    note = found.year_note
    assert note is not None
    assert note.startswith("kernel logs: 2 XID line(s) carry no year")
    assert f"guessed {guessed} from each log file's modification time" in note
    assert "--year YYYY" in note


def test_a_date_after_the_file_was_written_is_taken_from_the_year_before(
        tmp_path: Path) -> None:
    path = _log(tmp_path)
    mtime = datetime(2026, 1, 5, tzinfo=UTC).timestamp()  # a November line read in January
    os.utime(path, (mtime, mtime))
    found = read_kernel_log_truth([path])
    assert found.guessed_years == (2025,)
    assert found.truth.failures[0].time == _t(2025, 3, 12, 1)


def test_lines_with_a_year_need_no_guess(tmp_path: Path) -> None:
    text = ("2024-11-18T03:12:01+00:00 gpu-a07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
            "pid=1, name=python3, GPU has fallen off the bus.\n")
    found = read_kernel_log_truth([_log(tmp_path, text)])
    assert (found.yearless, found.year_note) == (0, None)
    assert found.truth.failures[0].time == _t(2024, 3, 12, 1)


def test_the_old_entry_point_logs_the_guess(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trainguard.detect.truth"):
        gt = truth_from_kernel_logs([_log(tmp_path)])
    assert len(gt.failures) == 2
    assert [r.getMessage() for r in caplog.records if "carry no year" in r.getMessage()]


@pytest.mark.parametrize("year", [1969, 2101])
def test_an_impossible_year_is_a_config_error(tmp_path: Path, year: int) -> None:
    with pytest.raises(ConfigError, match="--year must be between 1970 and 2100"):
        read_kernel_log_truth([_log(tmp_path)], year=year)


# --- failures outside the telemetry's span ---------------------------------------------------

SPAN = (1000.0, 5000.0)


def _truth(*times: float) -> GroundTruth:
    return GroundTruth(failures=tuple(Failure(f"n{i}", t, 79) for i, t in enumerate(times)))


def test_every_failure_is_in_or_out_of_span() -> None:
    check = check_span(_truth(10.0, 1000.0, 3000.0, 5000.0, 9000.0, 9999.0), SPAN)
    assert check.in_span == 3  # both ends included, as the scorecard counts them
    assert [f.time for f in check.before] == [10.0]
    assert [f.time for f in check.after] == [9000.0, 9999.0]
    assert (check.total, check.outside) == (6, 3)


def test_the_warning_counts_and_shows_examples() -> None:
    check = check_span(_truth(*(float(i) for i in range(5)), 3000.0), SPAN)
    line = check.warning("; give --year YYYY")
    assert line is not None
    assert line.startswith("5 of 6 failures fall outside the telemetry's time span "
                           "1970-01-01 00:16:40 .. 1970-01-01 01:23:20 UTC and are not scored "
                           "(5 before, 0 after): n0 1970-01-01 00:00:00 XID 79; n1 ")
    assert line.endswith("... (2 more); give --year YYYY")
    assert check.to_dict()["before"] == 5


def test_no_warning_when_every_failure_is_in_span() -> None:
    check = check_span(_truth(2000.0), SPAN)
    assert (check.in_span, check.warning()) == (1, None)
    assert check_span(GroundTruth(), SPAN).warning() is None


def test_failures_on_nodes_the_telemetry_does_not_name_are_counted() -> None:
    truth = GroundTruth(failures=(Failure("gpu-a07", 2000.0, 79), Failure("gpu-a08", 3000.0, 48),
                                  Failure("gpu-a09", 9000.0, 79)),
                        aliases=(("gpu-a08", "10.0.3.8"),))
    check = check_span(truth, SPAN, nodes=["10.0.3.8", "dcgm-exporter-x7k2p"])
    assert [f.node for f in check.unknown_node] == ["gpu-a07"]  # a08 is joined by its alias
    line = check.node_warning()
    assert line is not None
    assert line.startswith("1 of the 2 failures in span are on nodes the telemetry does not "
                           "name (gpu-a07): they cannot be detected")
    assert "--node-label NAME" in line
    assert check_span(truth, SPAN).node_warning() is None  # without nodes: not checked
