"""The detector's signal units, one module each, composed per block by `scoring.BlockScorer`.

A unit is a mutable dataclass holding its own slice of `DetectorConfig` (a frozen dataclass
built with `XConfig.of(cfg)`) and its own state across blocks, with
- `new(cfg)` (or the constructor) for an empty state;
- `grow(...)` to make room when metrics, nodes or GPUs appear (the layout only grows);
- `reset_metric(i)` to learn a metric afresh (its values changed meaning);
- `step(...)`: one block in, its output out (pure numpy, no I/O).

Units: `regime` (the block's context: presence, busy/idle, peer groups), `peer` (deviation from
peers), `baseline` (deviation from the series' own normal), `counters` (recurring error
counts), `fusion` (calibration and the node score), `precursor` (early warnings folded in) and
`hard_evidence` (XIDs, uncorrectable errors, vanished GPUs).
"""

from trainguard.detect.signals.baseline import BaselineConfig, BaselineDeviation
from trainguard.detect.signals.counters import CounterConfig, CounterDeviation
from trainguard.detect.signals.fusion import Fused, Fusion, FusionConfig
from trainguard.detect.signals.hard_evidence import HardConfig, HardEvidence
from trainguard.detect.signals.peer import PeerConfig, PeerDeviation
from trainguard.detect.signals.precursor import PrecursorConfig
from trainguard.detect.signals.regime import BlockContext, Regime, RegimeConfig

__all__ = [
    "BaselineConfig",
    "BaselineDeviation",
    "BlockContext",
    "CounterConfig",
    "CounterDeviation",
    "Fused",
    "Fusion",
    "FusionConfig",
    "HardConfig",
    "HardEvidence",
    "PeerConfig",
    "PeerDeviation",
    "PrecursorConfig",
    "Regime",
    "RegimeConfig",
]
