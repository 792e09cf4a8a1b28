"""Isolator: localizing a slow host or link from simulated pair measurements."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from trainguard.check.model import Level, link_name
from trainguard.check.pairing import Isolator, Pair, PairThresholds, ring_pairs, ring_rounds
from trainguard.errors import ConfigError

Link = Callable[[str, str], float | None]


def _hosts(n: int) -> list[str]:
    return [f"node{i}" for i in range(n)]


def _network(rng: random.Random, *, slow_hosts: frozenset[str] = frozenset(),
             slow_links: frozenset[str] = frozenset(), broken: frozenset[str] = frozenset(),
             scale: float = 1.0, noise: float = 0.15, base: float = 2200.0) -> Link:
    """A simulated network: each measurement is base x noise, a slow host or link at 0.1x."""
    def link(a: str, b: str) -> float | None:
        if link_name(a, b) in broken or {a, b} & broken:
            return None
        value = base * scale * rng.uniform(1 - noise, 1 + noise)
        if {a, b} & slow_hosts or link_name(a, b) in slow_links:
            value *= 0.1
        return value
    return link


def _drive(iso: Isolator, link: Link) -> list[list[Pair]]:
    rounds = []
    while (pairs := iso.next_round()) is not None:
        used = [h for p in pairs for h in p]
        assert len(used) == len(set(used)), f"pairs of one round overlap: {pairs}"
        rounds.append(pairs)
        iso.record({p: link(*p) for p in pairs})
    return rounds


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
def test_healthy_hosts_with_noise_give_no_finding(n: int) -> None:
    for seed in range(200):
        iso = Isolator(_hosts(n))
        rounds = _drive(iso, _network(random.Random(seed)))
        assert iso.findings() == [], f"seed {seed}"
        assert len(rounds) <= (3 if n <= 3 else 2)    # survey (+ the odd host's round)


@pytest.mark.parametrize(("n", "bad", "max_rounds"), [
    (8, "node3", 2), (8, "node0", 2), (16, "node11", 2),
    (4, "node2", 2), (5, "node4", 3), (5, "node1", 3), (7, "node6", 3), (7, "node2", 3),
])
def test_one_slow_host_is_named_and_nobody_else(n: int, bad: str, max_rounds: int) -> None:
    for seed in range(50):
        iso = Isolator(_hosts(n))
        rounds = _drive(iso, _network(random.Random(seed), slow_hosts=frozenset({bad})))
        findings = iso.findings()
        assert [(f.subject, f.kind, f.level) for f in findings] == [(bad, "host", Level.SLOW)]
        assert len(rounds) <= max_rounds
        assert "good pairs' median" in findings[0].reason and " with node" in findings[0].reason


@pytest.mark.parametrize(("n", "a", "b"), [(8, "node2", "node3"), (8, "node0", "node5"),
                                           (5, "node0", "node1"), (3, "node1", "node2")])
def test_one_slow_link_is_named_as_the_link(n: int, a: str, b: str) -> None:
    for seed in range(50):
        iso = Isolator(_hosts(n))
        net = _network(random.Random(seed), slow_links=frozenset({link_name(a, b)}))
        rounds = _drive(iso, net)
        found = [(f.subject, f.kind) for f in iso.findings()]
        touched = any(link_name(*p) == link_name(a, b) for r in rounds for p in r)
        assert found == ([(link_name(a, b), "link")] if touched else [])
        assert len(rounds) <= 4


def test_two_slow_hosts_in_different_pairs() -> None:
    for seed in range(50):
        iso = Isolator(_hosts(8))
        _drive(iso, _network(random.Random(seed), slow_hosts=frozenset({"node1", "node6"})))
        assert sorted(f.subject for f in iso.findings()) == ["node1", "node6"]


def test_two_slow_hosts_in_the_same_pair() -> None:
    iso = Isolator(_hosts(8))
    _drive(iso, _network(random.Random(1), slow_hosts=frozenset({"node2", "node3"})))
    assert sorted((f.subject, f.kind) for f in iso.findings()) == [("node2", "host"),
                                                                   ("node3", "host")]


def test_whole_cluster_slowdown_below_the_floor_is_one_cluster_finding() -> None:
    # Relative to each other, uniformly slow pairs look fine: only the floor can tell.
    iso = Isolator(_hosts(8), PairThresholds(floor_mbps=1000.0))
    rounds = _drive(iso, _network(random.Random(3), scale=0.1))
    (finding,) = iso.findings()
    assert (finding.subject, finding.kind, finding.level) == ("cluster", "cluster", Level.FAIL)
    assert "4 of 4 pairs bad" in finding.reason and "no single host" in finding.reason
    assert len(rounds) == 1


def test_most_pairs_slow_is_one_cluster_finding_not_hosts() -> None:
    hosts = _hosts(6)
    iso = Isolator(hosts)
    rounds = _drive(iso, _network(random.Random(3), slow_hosts=frozenset(hosts[:4])))
    (finding,) = iso.findings()
    assert (finding.subject, finding.kind, finding.level) == ("cluster", "cluster", Level.SLOW)
    assert "2 of 3 pairs bad" in finding.reason
    assert len(rounds) == 1


def test_broken_results_fail_the_host() -> None:
    iso = Isolator(_hosts(8))
    _drive(iso, _network(random.Random(0), broken=frozenset({"node5"})))
    (finding,) = iso.findings()
    assert (finding.subject, finding.level) == ("node5", Level.FAIL)
    assert "no data with node4" in finding.reason


def test_two_hosts_use_the_floor_only_and_report_the_link() -> None:
    th = PairThresholds(floor_mbps=1000.0)
    iso = Isolator(["a", "b"], th)
    _drive(iso, lambda a, b: 50.0)
    (finding,) = iso.findings()
    assert (finding.subject, finding.kind, finding.level) == ("a<->b", "link", Level.FAIL)
    assert "2 hosts" in finding.reason and "floor 1,000 MB/s" in finding.reason
    iso = Isolator(["a", "b"], th)
    _drive(iso, lambda a, b: 5000.0)
    assert iso.findings() == []


def test_a_hiccup_on_one_pair_is_remeasured_not_reported() -> None:
    calls: dict[str, int] = {}

    def link(a: str, b: str) -> float:
        name = link_name(a, b)
        calls[name] = calls.get(name, 0) + 1
        return 100.0 if name == "node0<->node1" and calls[name] == 1 else 2000.0

    iso = Isolator(_hosts(8))
    rounds = _drive(iso, link)
    assert iso.findings() == []
    assert calls["node0<->node1"] == 2 and len(rounds) == 3


def test_ring_rounds_are_disjoint_and_cover_the_ring() -> None:
    for n in range(2, 12):
        hosts = _hosts(n)
        rounds = ring_rounds(hosts)
        assert sorted(p for r in rounds for p in r) == sorted(ring_pairs(hosts))
        for r in rounds:
            used = [h for p in r for h in p]
            assert len(used) == len(set(used))
        assert len(rounds) == (1 if n == 2 else 2 if n % 2 == 0 else 3)


@pytest.mark.parametrize(("kwargs", "key"), [({"ratio": 1.5}, "link.ratio"),
                                             ({"floor_mbps": -1.0}, "link.floor_mbps"),
                                             ({"mad_z": 0.0}, "link.mad_z")])
def test_bad_thresholds_name_the_key(kwargs: dict[str, float], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        PairThresholds(**kwargs)


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="duplicate host"):
        Isolator(["a", "b", "a"])
    with pytest.raises(ConfigError, match="no hosts"):
        Isolator([])
    iso = Isolator(_hosts(4))
    pairs = iso.next_round()
    assert pairs is not None
    with pytest.raises(ConfigError, match="no result for pair"):
        iso.record({pairs[0]: 1.0})
    with pytest.raises(ConfigError, match="finite"):
        iso.record({p: float("nan") for p in pairs})
    with pytest.raises(ConfigError, match="not in this round"):
        iso.record({**{p: 1.0 for p in pairs}, ("node0", "node2"): 1.0})


def test_one_host_is_skipped() -> None:
    iso = Isolator(["solo"])
    assert iso.next_round() is None
    assert [f.level for f in iso.findings()] == [Level.SKIPPED]


def test_three_hosts_one_slow_reads_as_cluster() -> None:
    # 2 of the 3 links are slow: no majority of good links to name a host against.
    iso = Isolator(_hosts(3))
    _drive(iso, _network(random.Random(2), slow_hosts=frozenset({"node0"})))
    assert [(f.subject, f.kind) for f in iso.findings()] == [("cluster", "cluster")]


def test_record_needs_a_round_and_next_round_needs_a_record() -> None:
    iso = Isolator(_hosts(4))
    with pytest.raises(RuntimeError, match="without a round"):
        iso.record({})
    iso.next_round()
    with pytest.raises(RuntimeError, match="record"):
        iso.next_round()


@pytest.mark.parametrize("n", [4, 8])
def test_a_load_swing_between_rounds_is_not_a_slow_host(n: int) -> None:
    # Round 1 has a hiccup on node0<->node1; in round 2 the machines are busy and every pair
    # runs at 0.3x. Judged against the same round's pairs (controls), nobody is slow.
    rnd = [0]

    def link(a: str, b: str) -> float:
        if rnd[0] == 1:
            return 100.0 if link_name(a, b) == "node0<->node1" else 2000.0
        return 600.0 if rnd[0] == 2 else 2000.0

    iso = Isolator(_hosts(n))
    while (pairs := iso.next_round()) is not None:
        rnd[0] += 1
        if rnd[0] == 2 and n == 8:
            assert len(pairs) == 4      # two cross-checks and two control pairs
        iso.record({p: link(*p) for p in pairs})
    assert iso.findings() == []


@pytest.mark.parametrize(("controls", "found"), [(2, []), (0, ["node0<->node1"])])
def test_control_pairs_keep_a_load_swing_from_naming_a_link(controls: int,
                                                            found: list[str]) -> None:
    # Round 1: a hiccup on node0<->node1; round 2 clears both hosts; round 3 re-measures the
    # pair while the machines are busy (everything at 0.3x). Alone in its round it looks slow;
    # beside control pairs measured at the same moment it does not.
    rnd = [0]

    def link(a: str, b: str) -> float:
        if rnd[0] == 1 and link_name(a, b) == "node0<->node1":
            return 100.0
        return 600.0 if rnd[0] == 3 else 2000.0

    iso = Isolator(_hosts(8), controls=controls)
    while (pairs := iso.next_round()) is not None:
        rnd[0] += 1
        iso.record({p: link(*p) for p in pairs})
    assert [f.subject for f in iso.findings()] == found
    assert rnd[0] == 3


def test_a_confirming_round_says_why_and_controls_measure_new_links() -> None:
    # Round 1 (survey): node0<->node1 hiccups. Round 2 clears both of its hosts with other
    # partners. Round 3 re-measures it on purpose, and says so; its control pairs are links
    # not measured yet, not the survey's pairs again.
    calls: dict[str, int] = {}

    def link(a: str, b: str) -> float:
        name = link_name(a, b)
        calls[name] = calls.get(name, 0) + 1
        return 100.0 if name == "node0<->node1" and calls[name] == 1 else 2000.0

    iso = Isolator(_hosts(8))
    seen: set[str] = set()
    rounds: list[tuple[list[Pair], list[Pair], list[Pair]]] = []
    while (pairs := iso.next_round()) is not None:
        rounds.append((pairs, iso.confirming(pairs), iso.repeats(pairs)))
        assert {link_name(*p) for p in iso.repeats(pairs)} == \
            {link_name(*p) for p in pairs} & seen
        seen |= {link_name(*p) for p in pairs}
        iso.record({p: link(*p) for p in pairs})
    assert len(rounds) == 3
    third, confirming, repeats = rounds[2]
    assert [link_name(*p) for p in confirming] == ["node0<->node1"]
    assert repeats == confirming and len(third) == 3  # the re-measure and 2 new controls
    assert iso.findings() == []
    (note,) = iso.confirmations()
    assert note.level is Level.PASS and note.subject == "node0<->node1"
    assert "100 MB/s in round 1" in note.reason and "round 3 to confirm: 2,000 MB/s" in note.reason


def test_four_healthy_hosts_repeat_a_pair_only_to_confirm_it() -> None:
    # 4 hosts: the survey's 2 pairs are each other's only yardstick, so a moment of load on
    # one reads slow; the 3rd round re-measures it, and the report says why.
    n = [0]

    def link(a: str, b: str) -> float:
        n[0] += 1
        return 900.0 if n[0] == 1 else 2000.0

    iso = Isolator(_hosts(4))
    rounds = _drive(iso, link)
    assert len(rounds) == 3 and iso.findings() == []
    assert [f.subject for f in iso.confirmations()] == [link_name(*rounds[0][0])]


def test_no_confirmation_note_without_a_repeat() -> None:
    iso = Isolator(_hosts(8))
    _drive(iso, lambda a, b: 2000.0)
    assert iso.confirmations() == []
    slow = Isolator(_hosts(8))
    _drive(slow, _network(random.Random(1), slow_hosts=frozenset({"node3"})))
    assert slow.confirmations() == [] and [f.subject for f in slow.findings()] == ["node3"]
