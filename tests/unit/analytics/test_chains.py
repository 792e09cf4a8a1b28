"""Retry chains: success rate and retry intervals against a plain recomputation."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np
import pytest

from trainguard.analytics import chain_stats, load_runs, retry_chains
from trainguard.store import Store


@dataclass
class PlainChain:
    automatic: bool
    statuses: list[str] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)


def plain_chains(store: Store) -> list[PlainChain]:
    """Chains written out from the attempt records: a new chain at each session's first attempt,
    at each manual attempt and after a success."""
    out: list[PlainChain] = []
    for s in store.sessions():
        prev = None
        for a in store.attempts(s.id):
            if prev is None or not a.automatic or prev.status == "succeeded":
                out.append(PlainChain(a.automatic))
            if prev is not None and prev.ended is not None and prev.status != "succeeded":
                out[-1].gaps.append(a.started - prev.ended)
            out[-1].statuses.append(a.status)
            prev = a
    return out


def test_chains_match_plain(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    chains = retry_chains(load_runs(store))
    plain = plain_chains(store)
    assert [c.automatic for c in chains] == [p.automatic for p in plain]
    assert [list(c.retry_intervals_s) for c in chains] == [p.gaps for p in plain]
    assert [[a.status for a in c.attempts] for c in chains] == [p.statuses for p in plain]


def test_success_rate_and_median_interval(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    stats = chain_stats(retry_chains(load_runs(store)))
    finished = [p for p in plain_chains(store) if p.statuses[-1] != "running"]
    succeeded = [p for p in finished if p.statuses[-1] == "succeeded"]
    gaps = [g for p in finished for g in p.gaps]
    assert stats["all"].chains == len(finished) == 4
    assert stats["all"].success_rate == pytest.approx(len(succeeded) / len(finished))
    assert stats["all"].retry_interval_median_s == pytest.approx(statistics.median(gaps))
    assert stats["all"].retry_interval_p25_s == pytest.approx(float(np.percentile(gaps, 25)))
    assert stats["all"].retry_interval_p75_s == pytest.approx(float(np.percentile(gaps, 75)))
    # by hand: A [20, 30] succeeded, B [100] gave up, C: [] failed, [600] succeeded
    assert sorted(gaps) == pytest.approx([20.0, 30.0, 100.0, 600.0])
    assert stats["all"].retry_interval_median_s == pytest.approx(65.0)
    assert stats["all"].attempts_mean == pytest.approx((3 + 2 + 1 + 1) / 4)
    auto, manual = stats["automatic"], stats["manual"]
    assert (auto.chains, auto.succeeded, auto.retry_interval_median_s) == (2, 1, 30.0)
    assert (manual.chains, manual.succeeded, manual.retry_interval_median_s) == (2, 1, 600.0)


def test_running_chain_left_out(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    chains = retry_chains(load_runs(store, session_id=ids["D"]))
    assert len(chains) == 1 and chains[0].running and not chains[0].succeeded
    stats = chain_stats(chains)["all"]
    assert stats.chains == 0 and stats.success_rate is None
    assert stats.retry_interval_median_s is None


def test_success_then_continuation_starts_new_chain() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("s", backend="local", started=0.0)
        for i, (start, end, status) in enumerate([(0, 10, "succeeded"), (50, 60, "failed"),
                                                   (70, 80, "succeeded")]):
            aid = store.create_attempt(sid, index=i, nodes=["n"], started=start)
            store.finish_attempt(aid, ended=end, status=status)
        chains = retry_chains(load_runs(store))
    assert [len(c.attempts) for c in chains] == [1, 2]
    assert [c.retry_intervals_s for c in chains] == [(), (10.0,)]
    assert all(c.succeeded for c in chains)
