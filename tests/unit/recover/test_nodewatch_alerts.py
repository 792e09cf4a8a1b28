"""The supervisor's view of detector alerts: the stop message names each metric once."""

from __future__ import annotations

import json
from pathlib import Path

from trainguard.evidence.rules import load_rules
from trainguard.recover.watch import NodeWatch, alert_summary
from trainguard.taxonomy import Severity


def test_a_predictive_alert_names_each_metric_once_in_order(tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("")
    watch = NodeWatch({}, load_rules(), alerts_file=alerts, nodes=["node3"],
                      stop_on_predictive=True)
    signals = [{"metric": "ecc_sbe", "gpu": "0"}, {"metric": "ecc_sbe", "gpu": "1"},
               {"metric": "nvlink_crc", "gpu": "1"}, {"metric": "ecc_sbe", "gpu": "2"},
               {"metric": "temp"}, {"metric": "power"}]
    with open(alerts, "a") as f:
        f.write(json.dumps({"node": "node3", "start": 100.0, "kind": "predictive",
                            "signals": signals}) + "\n")
    [event] = watch.poll(0.0)
    assert event.severity is Severity.FATAL  # --stop-on-predictive: this stops the job
    assert event.summary == "detector predictive alert (ecc_sbe, nvlink_crc, temp)"


def test_signals_without_a_metric_are_left_out() -> None:
    assert alert_summary("hard", [{"gpu": "0"}, "junk", {"metric": "xid"}]) == \
        "detector hard alert (xid)"
    assert alert_summary("hard", None) == "detector hard alert"
