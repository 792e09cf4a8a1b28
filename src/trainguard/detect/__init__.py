"""Pure scoring: multi-signal node anomaly scores -> alert episodes; ground truth; backtest."""

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
from trainguard.detect.backtest import BASELINES, BacktestResult, run_backtest
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import Detector, detect
from trainguard.detect.scorecard import Scorecard, compare, score
from trainguard.detect.truth import (
    AppXid,
    BenignWindow,
    Failure,
    GroundTruth,
    KernelLogTruth,
    read_kernel_log_truth,
    truth_from_jsonl,
    truth_from_kernel_logs,
    truth_from_xid_gauge,
)
from trainguard.detect.truthspan import SpanCheck, check_span

__all__ = [
    "BASELINES",
    "AlertEpisode",
    "AlertKind",
    "AppXid",
    "BacktestResult",
    "BenignWindow",
    "Detector",
    "DetectorConfig",
    "Failure",
    "GroundTruth",
    "KernelLogTruth",
    "Scorecard",
    "Signal",
    "SpanCheck",
    "check_span",
    "compare",
    "detect",
    "read_kernel_log_truth",
    "run_backtest",
    "score",
    "truth_from_jsonl",
    "truth_from_kernel_logs",
    "truth_from_xid_gauge",
]
