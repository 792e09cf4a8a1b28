"""Exclusion concentration: top-3 share, Lorenz curve and lemon candidates."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from analytics_fleet import NOW

from trainguard.analytics import exclusion_counts, lemon_candidates, load_runs, lorenz
from trainguard.analytics.concentration import exclusion_concentration, run_nodes
from trainguard.nodehealth import node_health
from trainguard.store import Store


def test_top3_share_matches_plain(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    counts = exclusion_counts(store)
    plain = Counter(e.node for e in store.exclusions())
    assert counts == dict(plain)
    nodes = run_nodes(load_runs(store))
    conc = exclusion_concentration(counts, nodes, top_k=3)
    top3 = sum(sorted(plain.values(), reverse=True)[:3])
    assert conc.summary.top_k_share == pytest.approx(top3 / sum(plain.values()))
    assert conc.summary.top_k_share == pytest.approx(5 / 6)  # n3: 2, s2: 2, then m2 or n5: 1
    assert conc.summary.nodes == 10
    assert list(conc.counts)[:2] == ["n3", "s2"]


def test_exclusion_counts_from_records(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    assert exclusion_counts(store.exclusions()) == exclusion_counts(store)


@pytest.mark.parametrize(("counts", "nodes", "expected"), [
    ({}, [], ((0.0, 0.0), (1.0, 1.0))),
    ({}, ["a", "b"], ((0.0, 0.0), (0.5, 0.5), (1.0, 1.0))),
    ({"a": 1, "b": 1}, [], ((0.0, 0.0), (0.5, 0.5), (1.0, 1.0))),
    ({"a": 3, "b": 1}, ["a", "b", "c", "d"],
     ((0.0, 0.0), (0.25, 0.0), (0.5, 0.0), (0.75, 0.25), (1.0, 1.0))),
])
def test_lorenz(counts: dict[str, int], nodes: list[str],
                expected: tuple[tuple[float, float], ...]) -> None:
    assert lorenz(counts, nodes) == expected  # exact in binary


def test_lorenz_area_gives_gini(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    conc = exclusion_concentration(exclusion_counts(store), run_nodes(load_runs(store)))
    pts = conc.lorenz
    area = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in itertools.pairwise(pts))
    assert 1 - 2 * area == pytest.approx(conc.summary.gini)
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(pts))


def test_lemon_candidates_are_node_health_lemons(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    lemons = lemon_candidates(store, NOW)
    assert [h.node for h in lemons] == [h.node for h in node_health(store, NOW) if h.lemon]
    assert "n3" in [h.node for h in lemons]
