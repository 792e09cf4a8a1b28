"""Parsing the prefix of one log line: time, host, rank and GPU."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from trainguard.evidence.events import TimeKind
from trainguard.evidence.lineparse import parse_iso, parse_prefix, shift_year_if_future

ABS = TimeKind.ABSOLUTE
REL = TimeKind.RELATIVE
NONE = TimeKind.NONE
YEAR = 2026


def _utc(*args: int, us: int = 0) -> float:
    return datetime(*args, tzinfo=UTC).timestamp() + us / 1e6  # type: ignore[misc]


T = _utc(2026, 11, 21, 12, 1, 2)  # Sat Nov 21 12:01:02 2026 UTC
MSG = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("line", "time", "kind", "host", "rank"),
    [
        pytest.param(f"Nov 21 12:01:02 node17 kernel: {MSG}", T, ABS, "node17", None,
                     id="rfc3164"),
        pytest.param(f"Nov  1 12:01:02 node17 kernel: {MSG}", _utc(2026, 11, 1, 12, 1, 2), ABS,
                     "node17", None, id="rfc3164-single-digit-day"),
        pytest.param(f"Nov 21 12:01:02.250 node17 kernel: {MSG}", T + 0.25, ABS, "node17", None,
                     id="rfc3164-fraction"),
        pytest.param(f"<3>1 2026-11-21T12:01:02.1Z node17 kernel - - - {MSG}", T + 0.1, ABS,
                     "node17", None, id="rfc5424"),
        pytest.param(f"<3>1 2026-11-21T14:01:02+02:00 node17 kernel - - - {MSG}", T, ABS,
                     "node17", None, id="rfc5424-offset"),
        pytest.param(f"2026-11-21T12:01:02Z node17 kernel: {MSG}", T, ABS, "node17", None,
                     id="iso-z"),
        pytest.param(f"2026-11-21T12:01:02.123+00:00 node17 kernel: {MSG}", T + 0.123, ABS,
                     "node17", None, id="iso-colon-offset"),
        pytest.param(f"2026-11-21T12:01:02.5+0000 node17 kernel: {MSG}", T + 0.5, ABS, "node17",
                     None, id="iso-compact-offset"),
        pytest.param(f"2026-11-21T13:01:02+0100 node17 kernel: {MSG}", T, ABS, "node17", None,
                     id="iso-nonzero-offset"),
        pytest.param(f"2026-11-21T12:01:02 node17 kernel: {MSG}", T, ABS, "node17", None,
                     id="iso-naive-is-utc"),
        pytest.param(f"2026-11-21T12:01:02.123456+00:00 node17 kernel: [ 1234.567890] {MSG}",
                     T + 0.123456, ABS, "node17", None, id="journalctl-short-iso-with-dmesg"),
        pytest.param("[2026-11-21 12:01:02,123] torch.distributed.elastic.multiprocessing.api: "
                     "[ERROR] failed (exitcode: -9) local_rank: 0 (pid: 62498) of binary",
                     T + 0.123, ABS, None, None, id="python-logging"),
        pytest.param("[2026-11-21 12:01:02,123] [ERROR] [launch.py:321:sigkill_handler] "
                     "exits with return code = -9", T + 0.123, ABS, None, None,
                     id="deepspeed-logging"),
        pytest.param(f"[Sat Nov 21 12:01:02 2026] {MSG}", T, ABS, None, None, id="dmesg-T"),
        pytest.param(f"[ 1234.567890] {MSG}", 1234.56789, REL, None, None, id="dmesg-relative"),
        pytest.param(f"[812345.678901] {MSG}", 812345.678901, REL, None, None,
                     id="dmesg-relative-wide"),
        pytest.param("[rank3]:[E1121 12:01:02.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 3] "
                     "Watchdog caught collective operation timeout", T + 0.123456, ABS, None, 3,
                     id="glog-rank"),
        pytest.param("E1121 12:01:02.123000 140211 torch/distributed/elastic/multiprocessing/"
                     "api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 155690) of binary",
                     T + 0.123, ABS, None, None, id="glog-python-elastic"),
        # PyTorch >= 2.4 (c10 logging): nanoseconds, no thread id, month not zero-padded.
        pytest.param("[rank3]:[E1121 12:01:02.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] "
                     "Watchdog caught collective operation timeout", T + 0.123456789, ABS, None, 3,
                     id="c10-log-rank-no-tid"),
        pytest.param("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] "
                     "Watchdog caught collective operation timeout",
                     _utc(2026, 3, 21, 2, 7, 8) + 0.408271257, ABS, None, 0,
                     id="c10-log-unpadded-month"),
        pytest.param("3: RuntimeError: CUDA error: an illegal memory access was encountered",
                     None, NONE, None, 3, id="srun-l"),
        pytest.param("[1,3]<stderr>:RuntimeError: CUDA error: an illegal memory access",
                     None, NONE, None, 3, id="mpirun"),
        pytest.param("[default5]:RuntimeError: CUDA error: an illegal memory access", None, NONE,
                     None, 5, id="torchrun-tee"),
        # kubectl logs --timestamps puts an RFC 3339 (nanosecond) time before torchrun's prefix.
        pytest.param("2026-11-21T12:01:02.123456789Z [rank5]: torch.OutOfMemoryError: CUDA out "
                     "of memory.", T + 0.123456, ABS, None, 5, id="kubectl-timestamps-rank"),
        pytest.param(f"Mar 29 15:38:59 kernel: {MSG}", _utc(2026, 3, 29, 15, 38, 59), ABS, None,
                     None, id="hostless-syslog"),
        pytest.param("RuntimeError: CUDA error: an illegal memory access was encountered", None,
                     NONE, None, None, id="bare"),
    ],
)
def test_parse_prefix(line: str, time: float | None, kind: TimeKind, host: str | None,
                      rank: int | None) -> None:
    p = parse_prefix(line, YEAR)
    if time is None:
        assert p.time is None
    else:
        assert p.time == pytest.approx(time, abs=1e-6)
    assert (p.time_kind, p.host, p.rank) == (kind, host, rank)


@pytest.mark.parametrize(
    ("line", "host", "gpu_index"),
    [
        pytest.param("node17:1234:1240 [3] NCCL WARN NET/IB : Got completion from peer "
                     "10.0.0.18<53249> with status=12", "node17", 3, id="nccl-warn"),
        pytest.param("node17:1234:1240 [3] NCCL INFO transport/net.cc:1008 -> 6", "node17", 3,
                     id="nccl-info"),
        # NCCL >= 2.8 prints the source location before "NCCL WARN".
        pytest.param("node17:1234:1240 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got "
                     "completion from peer 10.0.0.18<53249> with error 4", "node17", 3,
                     id="nccl-warn-with-source-location"),
        pytest.param("gpu-node-17.cluster.local:1234:1240 [7] NCCL WARN Cuda failure 'invalid "
                     "argument'", "gpu-node-17.cluster.local", 7, id="nccl-fqdn"),
        # torchrun --tee prefixes every line of worker output with "[default<local_rank>]:".
        pytest.param("[default3]:node17:1234:1240 [3] NCCL WARN NET/IB : Got completion",
                     "node17", 3, id="nccl-after-torchrun-prefix"),
    ],
)
def test_parse_prefix_nccl_host_and_device(line: str, host: str, gpu_index: int) -> None:
    p = parse_prefix(line, YEAR)
    assert (p.host, p.gpu_index) == (host, gpu_index)


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[E ProcessGroupNCCL.cpp:475] [Rank 7] Watchdog caught collective operation timeout", 7),
        ("NCCL communicator was aborted on rank 6. Original reason for failure was: x", 6),
        ("Process group watchdog thread terminated with exception: rank=12", 12),
    ],
)
def test_rank_found_inside_the_message(line: str, rank: int) -> None:
    assert parse_prefix(line, YEAR).rank == rank


def test_prefix_rank_wins_over_rank_in_message() -> None:
    p = parse_prefix("[rank3]: NCCL communicator was aborted on rank 6.", YEAR)
    assert p.rank == 3


def test_year_parameter_fills_yearless_formats() -> None:
    line = f"Nov 21 12:01:02 node17 kernel: {MSG}"
    assert parse_prefix(line, 2024).time == _utc(2024, 11, 21, 12, 1, 2)
    glog = "[rank3]:[E1121 12:01:02.000000 1234 ProcessGroupNCCL.cpp:616] x"
    assert parse_prefix(glog, 2024).time == _utc(2024, 11, 21, 12, 1, 2)


@pytest.mark.parametrize(
    "line",
    [
        f"Feb 30 12:01:02 node17 kernel: {MSG}",  # no such day
        f"Nov 21 25:01:02 node17 kernel: {MSG}",  # no such hour
        "[rank3]:[E1321 12:01:02.123456 1234 ProcessGroupNCCL.cpp:616] x",  # month 13
    ],
)
def test_impossible_dates_give_no_time_not_an_error(line: str) -> None:
    p = parse_prefix(line, YEAR)
    assert p.time is None
    assert p.time_kind is NONE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T12:01:02Z", T),
        ("2026-11-21 12:01:02,500", T + 0.5),
        ("2026-11-21T12:01:02-0500", T + 5 * 3600),
        ("not a time", None),
    ],
)
def test_parse_iso(text: str, expected: float | None) -> None:
    assert parse_iso(text) == expected


@pytest.mark.parametrize(
    ("ts", "reference", "expected"),
    [
        # A December syslog line read in January belongs to the previous year.
        (_utc(2027, 12, 31, 23, 0, 0), _utc(2027, 1, 2, 0, 0, 0), _utc(2026, 12, 31, 23, 0, 0)),
        # Within a month of the reference: left alone (clock skew, late flush).
        (_utc(2026, 11, 25, 0, 0, 0), _utc(2026, 11, 21, 0, 0, 0), _utc(2026, 11, 25, 0, 0, 0)),
        # In the past: left alone.
        (_utc(2026, 1, 1, 0, 0, 0), _utc(2026, 11, 21, 0, 0, 0), _utc(2026, 1, 1, 0, 0, 0)),
    ],
)
def test_shift_year_if_future(ts: float, reference: float, expected: float) -> None:
    assert shift_year_if_future(ts, reference) == expected
