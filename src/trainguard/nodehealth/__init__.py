"""Node-health memory: what each node did to past jobs (from the store), lemon scores, and how
unevenly exclusions fall on nodes. `analytics` and the ``trainguard nodes`` command read it;
`recover` does not (it records exclusions, the store remembers them).

    >>> from trainguard.store import Store
    >>> with Store.open(":memory:") as store:
    ...     _ = store.add_exclusion("node7", reason="XID 79", created=0.0, source="operator")
    ...     [(h.node, h.excluded) for h in node_health(store, now=10.0)]
    [('node7', True)]
"""

from __future__ import annotations

from trainguard.nodehealth.health import (
    WEIGHTS,
    Concentration,
    IncidentKind,
    LemonPolicy,
    LemonScore,
    NodeIncident,
    by_node,
    concentration,
    lemon_score,
)
from trainguard.nodehealth.nodes import NodeHealth, exclusion_concentration, incidents, node_health

__all__ = [
    "WEIGHTS",
    "Concentration",
    "IncidentKind",
    "LemonPolicy",
    "LemonScore",
    "NodeHealth",
    "NodeIncident",
    "by_node",
    "concentration",
    "exclusion_concentration",
    "incidents",
    "lemon_score",
    "node_health",
]
