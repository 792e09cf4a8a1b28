"""A replayed predictive alert (`--inject alert:node=X --alerts-replay FILE`) carries the lead it
had in the history it comes from: the time from its onset to the hard alert (the XID) that
followed it on the node. The supervisor's event keeps it, and the report's lead time is that
lead, not the alert -> stop reaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.analytics.leadtime import PREDICTED_FAILURE_IN_S, alert_marks
from trainguard.evidence.rules import RuleSet
from trainguard.recover.inject import alert_record, foretold_in_s
from trainguard.recover.watch import NodeWatch

T0 = 1_732_033_410.0


def record(node: str, start: float, kind: str, source: str = "trainguard") -> dict[str, object]:
    return {"node": node, "start": start, "end": start, "peak_score": 50.0, "kind": kind,
            "signals": [{"metric": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu": "1",
                         "deviation": 4.0}], "source": source}


def write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("lead_s", [720.0, 870.0])
def test_the_replayed_alert_carries_its_lead_to_the_supervisor_s_event(
        tmp_path: Path, lead_s: float) -> None:
    replay = write(tmp_path / "alerts.jsonl", [
        record("node08", T0, "predictive"),
        record("node08", T0 + lead_s, "hard"),
        record("node08", T0 + 30.0, "hard", source="static"),  # another detector's
        record("node09", T0 + 60.0, "hard"),                   # another node's
    ])
    now = 1_795_654_930.0
    rec = alert_record("node08", now, replay)
    assert (rec["kind"], rec["start"], rec[PREDICTED_FAILURE_IN_S]) == \
        ("predictive", now, lead_s)

    feed = tmp_path / "alerts-live.jsonl"
    feed.touch()
    watch = NodeWatch({"node08": tmp_path / "kern.log"}, RuleSet([]), alerts_file=feed,
                      stop_on_predictive=True)
    write(feed, [rec])
    (mark,) = alert_marks(watch.poll(now))
    assert mark.stopped and mark.predicted_lead_s == pytest.approx(lead_s)


def test_no_lead_without_a_hard_alert_after_it_within_a_day() -> None:
    first = record("node08", T0, "predictive")
    assert foretold_in_s(first, [first]) is None
    assert foretold_in_s(first, [first, record("node08", T0 - 60.0, "hard")]) is None
    assert foretold_in_s(first, [first, record("node08", T0 + 2 * 86400.0, "hard")]) is None
    hard = record("node08", T0, "hard")
    assert foretold_in_s(hard, [hard, record("node08", T0 + 60.0, "hard")]) is None
