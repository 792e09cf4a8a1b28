"""How much a probe's figure moves between its own repeats on one host (its run-to-run spread).

A probe that repeats its measurement (best of several GEMMs, several read passes) reports, with
each figure, the relative spread of the repeats: ``1 - low / high``, where ``low`` and ``high``
are the smallest and largest repeat (from five repeats on, the single most extreme one at each
end is left out, so that one hiccup does not count as the host's noise).

    >>> relative_spread([100.0, 90.0, 80.0])
    0.2
    >>> relative_spread([100.0])
    0.0

The judge (:mod:`trainguard.check.judge`) needs a host's gap to the other hosts to exceed a
multiple of this spread before it names the host: a figure that moves by 40% between the
host's own repeats says nothing about a 40% gap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def relative_spread(samples: Sequence[float]) -> float:
    """``1 - low / high`` of the finite, positive ``samples`` (trimmed by one at each end from
    five on), in [0, 1]; 0 for fewer than two."""
    values = sorted(v for v in samples if math.isfinite(v) and v > 0)
    if len(values) >= 5:
        values = values[1:-1]
    if len(values) < 2:
        return 0.0
    return round(1.0 - values[0] / values[-1], 4)


__all__ = ["relative_spread"]
