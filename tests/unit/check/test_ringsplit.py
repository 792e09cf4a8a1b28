"""Localizing the host that breaks the ring-wide all-reduce: the verdict from a table of subset
outcomes, and the planner against simulated faults."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainguard.check.model import Level
from trainguard.check.ringsplit import RingSplitter, RingVerdict, Subset, localize
from trainguard.errors import ConfigError

H4 = ("a", "b", "c", "d")


@pytest.mark.parametrize(("outcomes", "expected"), [
    # the pair with c fails, c fails again with a cleared host: c
    ([(("a", "b"), True), (("c", "d"), False), (("c", "a"), False), (("d", "b"), True)],
     RingVerdict(("c",), (), (), True)),
    # only the survey: c and d both open
    ([(("a", "b"), True), (("c", "d"), False)], RingVerdict((), (), ("c", "d"), True)),
    # nothing completes
    ([(("a", "b"), False), (("c", "d"), False)], RingVerdict((), (), H4, False)),
    # every subset completes: nothing singled out, nothing unresolved
    ([(("a", "b"), True), (("c", "d"), True)], RingVerdict((), (), (), True)),
    # c and d each complete elsewhere, fail together: their link
    ([(("a", "b"), True), (("c", "d"), False), (("c", "a"), True), (("d", "b"), True)],
     RingVerdict((), (("c", "d"),), (), True)),
    # two faulty hosts, each failing with a cleared partner
    ([(("a", "b"), False), (("c", "d"), True), (("a", "c"), False), (("b", "d"), False)],
     RingVerdict(("a", "b"), (), (), True)),
    # a host common to all failing subsets, never completing: named once
    ([(("a", "b"), True), (("c", "a"), False), (("c", "b"), False), (("d", "a"), True)],
     RingVerdict(("c",), (), (), True)),
    # two hosts alone: one cannot run the collective at all
    ([(("a",), True), (("b",), False)], RingVerdict(("b",), (), (), True)),
])
def test_localize_from_a_table_of_outcomes(outcomes: list[tuple[Subset, bool]],
                                           expected: RingVerdict) -> None:
    hosts = ("a", "b") if all(len(s) == 1 for s, _ in outcomes) else H4
    assert localize(hosts, outcomes) == expected


def _drive(hosts: tuple[str, ...], completes: Callable[[Subset], bool]) -> RingSplitter:
    split = RingSplitter(hosts)
    while (subsets := split.next_round()) is not None:
        used = [h for s in subsets for h in s]
        assert len(used) == len(set(used)), subsets  # disjoint: one rank per host
        split.record({s: completes(s) for s in subsets})
    return split


def _without(bad: set[str]) -> Callable[[Subset], bool]:
    return lambda s: not bad & set(s)


@pytest.mark.parametrize("n", [3, 4, 5, 8])
@pytest.mark.parametrize("position", [0, 1, -1])
def test_one_faulty_host_is_named_in_two_rounds(n: int, position: int) -> None:
    # (with 3 hosts one pair runs per round: up to 3)
    hosts = tuple(f"h{i}" for i in range(n))
    bad = hosts[position]
    split = _drive(hosts, _without({bad}))
    findings = split.findings()
    assert [(f.subject, f.kind, f.level) for f in findings] == [(bad, "host", Level.FAIL)]
    assert split.rounds == 2 or (n == 3 and split.rounds == 3)
    assert "completes without it" in findings[0].reason


def test_two_hosts_one_of_which_cannot_run_at_all() -> None:
    split = _drive(("a", "b"), lambda s: s != ("b",))
    assert [f.subject for f in split.findings()] == ["b"] and split.rounds == 1


def test_two_hosts_that_each_run_alone_are_the_cluster() -> None:
    split = _drive(("a", "b"), lambda s: True)
    [f] = split.findings()
    assert (f.subject, f.kind, f.level) == ("cluster", "cluster", Level.FAIL)


def test_a_whole_broken_ring_is_the_cluster_after_one_re_pairing() -> None:
    split = _drive(tuple(f"h{i}" for i in range(8)), lambda s: False)
    [f] = split.findings()
    assert (f.subject, f.level) == ("cluster", Level.FAIL)
    assert "no subset" in f.reason and split.rounds == 2


def test_two_faulty_hosts_in_one_survey_pair_are_both_named() -> None:
    split = _drive(tuple(f"h{i}" for i in range(6)), _without({"h2", "h3"}))
    assert sorted(f.subject for f in split.findings()) == ["h2", "h3"]


def test_two_faulty_hosts_in_different_pairs_are_both_named() -> None:
    split = _drive(tuple(f"h{i}" for i in range(6)), _without({"h0", "h3"}))
    assert sorted(f.subject for f in split.findings()) == ["h0", "h3"]


def test_a_broken_link_between_two_good_hosts_is_named_as_the_link() -> None:
    split = _drive(H4, lambda s: set(s) != {"a", "b"})
    [f] = split.findings()
    assert (f.subject, f.kind) == ("a<->b", "link")


def test_a_fault_only_the_whole_ring_shows_is_the_cluster() -> None:
    split = _drive(H4, lambda s: True)
    [f] = split.findings()
    assert f.subject == "cluster" and "every host completes" in f.reason


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="2 or more"):
        RingSplitter(["a"])
    with pytest.raises(ConfigError, match="2 or more"):
        RingSplitter(["a", "a"])
