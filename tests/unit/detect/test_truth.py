from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainguard.detect.truth import (
    AppXid,
    BenignWindow,
    Failure,
    truth_from_jsonl,
    truth_from_kernel_logs,
    truth_from_xid_gauge,
)
from trainguard.errors import ConfigError
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_jsonl_lenient_keys_and_types(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "truth.jsonl", [
        {"node": "n1", "time": 1000, "xid": 79, "type": "failure", "gpu": 3},
        {"host": "n2", "t": "1970-01-01T00:20:00Z", "xid": 48, "failure_type": "dbe"},
        {"hostname": "n3", "timestamp": "1970-01-01T00:30:00", "xid": 13},
        {"node": "n4", "t_xid": 2000.5, "xid": 45, "type": "failure"},
        {"node": "n5", "type": "maintenance", "start": 0, "end": "1970-01-01T01:00:00+00:00"},
        {"node": "n6", "type": "benign", "start": 10, "end": 20, "what": "burn-in"},
        {"node": "n7", "type": "app_xid", "time": 5, "xid": 31},
        {"node": "n8", "type": "reboot", "time": 5},
        "",
        "# a comment",
    ])
    gt = truth_from_jsonl(p)
    assert gt.failures == (
        Failure("n1", 1000.0, 79, "3", "xid79", "jsonl"),
        Failure("n2", 1200.0, 48, None, "dbe", "jsonl"),
        Failure("n4", 2000.5, 45, None, "xid45", "jsonl"),  # explicit type wins
    )
    assert gt.app_xids == (AppXid("n7", 5.0, 31), AppXid("n3", 1800.0, 13))
    # "benign" look-alikes do not excuse alerts: skipped and counted, like unknown types
    assert gt.benign == (BenignWindow("n5", 0.0, 3600.0, "maintenance"),)
    assert gt.ignored == 2
    assert gt.to_dict()["failures"][0]["gpu"] == "3"


@pytest.mark.parametrize(("line", "match"), [
    ("{not json", "not valid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"time": 5, "xid": 79}', "needs a node name"),
    ('{"node": "n1", "xid": 79}', "needs a time"),
    ('{"node": "n1", "time": "yesterday", "xid": 79}', "not unix seconds or ISO-8601"),
    ('{"node": "n1", "time": 5, "xid": "abc"}', "xid must be an integer"),
    ('{"node": "n1", "time": 5}', "neither a type nor an xid"),
    ('{"node": "n1", "type": "maintenance", "start": 5}', "needs start and end"),
    ('{"node": "n1", "type": "maintenance", "start": 5, "end": 1}', "end is before start"),
    ('{"node": "n1", "type": "app_xid", "time": 5}', "needs an xid"),
])
def test_jsonl_bad_line_names_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    p = write_jsonl(tmp_path / "t.jsonl", [{"node": "n0", "time": 1, "xid": 79}, line])
    with pytest.raises(ConfigError, match=match) as info:
        truth_from_jsonl(p)
    assert f"{p}:2:" in str(info.value)


def test_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read ground truth"):
        truth_from_jsonl(tmp_path / "nope.jsonl")


def gauge_tel(rows: dict[tuple[str, str], list[float]], step: int = 60) -> Telemetry:
    ents = tuple(Entity(n, g) for n, g in rows)
    values = np.array([rows[k] for k in rows], dtype=np.float64)
    times = np.arange(values.shape[1], dtype=np.int64) * step
    m = MetricSeries("DCGM_FI_DEV_XID_ERRORS", MetricKind.GAUGE, ents, values)
    other = MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.GAUGE, ents, values + 99)
    return Telemetry(times, step, (other, m))


NAN = float("nan")


def test_xid_gauge_changes_become_failures_and_app_xids() -> None:
    tel = gauge_tel({
        ("n1", "0"): [0, 0, 79, 79, NAN, 79, 0, 0],   # one 79; NaN gap and return: same value
        ("n1", "1"): [0, 0, 0, 45, 45, 45, 45, 45],   # consequence of the 79: merged
        ("n2", "0"): [0, 13, 13, 0, 0, 0, 0, 0],      # application XID
        ("n3", "2"): [48, 48, 48, 48, 63, 63, 63, 63],  # non-zero from the start, then change
    }, step=60)
    gt = truth_from_xid_gauge(tel)
    assert gt.failures == (
        Failure("n3", 0.0, 48, "2", "xid48", "xid_gauge"),
        Failure("n1", 120.0, 79, "0", "xid79", "xid_gauge"),
    )
    assert gt.app_xids == (AppXid("n2", 60.0, 13),)


def test_xid_gauge_merge_window_is_30_min() -> None:
    step = 600  # 10-min grid
    tel = gauge_tel({
        ("n1", "0"): [0, 79, 0, 0, 0, 0, 0, 0, 0, 0],
        ("n1", "1"): [0, 0, 0, 0, 74, 0, 0, 0, 0, 0],  # exactly 30 min later: a new failure
        ("n1", "2"): [0, 0, 0, 0, 0, 0, 94, 0, 0, 0],  # 20 min after that: same failure
        ("n2", "0"): [0, 79, 0, 45, 0, 0, 0, 0, 45, 0],  # 45 at +20 min merged; at +70 app XID
    }, step=step)
    gt = truth_from_xid_gauge(tel)
    assert [(f.node, f.time, f.xid) for f in gt.failures] == [
        ("n1", 600.0, 79), ("n2", 600.0, 79), ("n1", 2400.0, 74)]
    assert gt.app_xids == (AppXid("n2", 4800.0, 45),)


def test_kernel_logs(tmp_path: Path) -> None:
    (tmp_path / "node7").mkdir()
    (tmp_path / "node7" / "kern.log").write_text(
        "2024-05-01T10:00:00+00:00 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, "
        "name=python, GPU has fallen off the bus.\n"
        "2024-05-01T10:05:00+00:00 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=1, "
        "name=python, Ch 00000010\n")
    (tmp_path / "node8.log").write_text(
        "2024-05-01T11:00:00+00:00 kernel: NVRM: Xid (PCI:0000:5e:00): 13, pid=2, "
        "name=python, Graphics Exception\n"
        "2024-05-01T12:00:00+00:00 kernel: NVRM: Xid (PCI:0000:5e:00): 48, pid=2, "
        "name=python, An uncorrectable double bit error\n")
    gt = truth_from_kernel_logs([tmp_path])
    t79 = 1714557600.0
    assert [(f.node, f.time, f.xid, f.source) for f in gt.failures] == [
        ("node7", t79, 79, "kernel_log"), ("node8", t79 + 2 * 3600, 48, "kernel_log")]
    assert gt.failures[0].gpu == "0000:3b:00.0"
    assert gt.app_xids == (AppXid("node8", t79 + 3600, 13),)


def test_kernel_logs_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no kernel log could be read"):
        truth_from_kernel_logs([tmp_path / "missing.log"])
