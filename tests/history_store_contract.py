"""Backend-independent checks of the store's imported fault histories, run against SQLite
(tests/unit/store/test_store_histories.py) and PostgreSQL
(tests/integration/test_store_postgres_histories.py). Each takes the URL of a fresh database."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from trainguard.errors import FleetError, StoreError
from trainguard.fleet import FaultEvent, FleetWindow
from trainguard.store import HistoryExists, Store, UnknownHistory, resolve_db_url

T0 = 1_700_000_000.123456  # sub-millisecond digits: times must survive as doubles
DAY = 86400.0

Check = Callable[[str], None]

DBE = "Hardware Failure / GPU / GPU DBE > Threshold"
STRESS = "Other / Stress Test Failure"


def faults_of(events: Sequence[FaultEvent]) -> list[tuple[FaultEvent, int | None]]:
    """The events with source lines 2, 3, 4... (the header is line 1)."""
    return [(ev, i + 2) for i, ev in enumerate(events)]


SAMPLE = (  # not in (node, start) order, one open fault, one end on the window's end
    FaultEvent("node-b", T0 + 5 * DAY, T0 + 5.5 * DAY, DBE, "gpu"),
    FaultEvent("node-a", T0 + 2 * DAY + 0.5, None, STRESS, "Other"),
    FaultEvent("node-b", T0 + DAY, T0 + DAY + 3600.25, "NIC / ünïcode ✓ 'q' \"dq\"", "network"),
    FaultEvent("node-a", T0 + 0.25, T0 + 30 * DAY, DBE, "gpu"),
)


def add(store: Store, name: str, events: Sequence[FaultEvent] = SAMPLE, **overrides: Any) -> int:
    values: dict[str, Any] = {
        "source": "/data/trace.csv", "fmt": "csv", "fleet_size": 4, "window_start": T0,
        "window_end": T0 + 30 * DAY, "origin": None, "counts": {"records": len(events)},
        "meta": {}, "faults": faults_of(events),
    }
    values.update(overrides)
    return store.add_fault_history(name, **values)


def _count_faults(url: str, history_id: int | None = None) -> int:
    """history_faults rows, read with plain SQL (not through the store)."""
    engine = sa.create_engine(resolve_db_url(url))
    where = "" if history_id is None else f" WHERE history_id = {int(history_id)}"
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM history_faults{where}"))
                       .scalar_one())
    finally:
        engine.dispose()


def check_round_trip(url: str) -> None:
    counts = {"records": 7, "faults": 4, "duplicates_merged": 1, "overlaps_merged": 0,
              "open_faults": 1, "refused": 2}
    meta = {"fields": {"node": "host", "type": ["Level", "Class", "Desc"]}, "unit": "days",
            "tz": None}
    with Store.open(url) as store:
        hid = add(store, "infinitehbd", source="/data/ünïcode trace.csv", fmt="json",
                  fleet_size=300, origin=T0 - 0.5, counts=counts, meta=meta, imported=T0 + 99)
        rec = store.fault_history("infinitehbd")
        assert rec.id == hid
        assert (rec.name, rec.source, rec.fmt, rec.fleet_size) == (
            "infinitehbd", "/data/ünïcode trace.csv", "json", 300)
        assert (rec.window_start, rec.window_end, rec.origin, rec.imported) == (
            T0, T0 + 30 * DAY, T0 - 0.5, T0 + 99)
        assert rec.counts == counts and rec.meta == meta
        assert rec.faults == 4
        assert rec.window == FleetWindow(T0, T0 + 30 * DAY, 300)
        assert store.fault_history(str(hid)) == rec  # by id when no history has that name
        assert store.fault_history(None) == rec
        assert store.fault_histories() == [rec]
        by_node = sorted(SAMPLE, key=lambda ev: (ev.node, ev.start))
        assert store.history_events(hid) == by_node
        lines = {ev: line for ev, line in faults_of(SAMPLE)}
        assert store.history_faults(hid) == [(ev, lines[ev]) for ev in by_node]
        open_faults = [ev for ev in store.history_events(hid) if ev.end is None]
        assert open_faults == [SAMPLE[1]]


def check_lines_may_be_absent(url: str) -> None:
    with Store.open(url) as store:
        hid = store.add_fault_history(
            "slurm", source="sacct", fmt="slurm", fleet_size=2, window_start=T0,
            window_end=T0 + DAY, origin=None, counts={}, meta={},
            faults=[(SAMPLE[0], None), (SAMPLE[1], 12)], imported=T0)
        assert store.history_faults(hid) == [(SAMPLE[1], 12), (SAMPLE[0], None)]


def check_newest_first(url: str) -> None:
    with Store.open(url) as store:
        first = add(store, "first", imported=T0 + 10)
        newest = add(store, "newest", imported=T0 + 30)
        middle = add(store, "middle", imported=T0 + 20)
        tie = add(store, "tie", imported=T0 + 30)  # same instant: the later import wins
        assert [h.id for h in store.fault_histories()] == [tie, newest, middle, first]
        assert store.fault_history(None).id == tie
        store.delete_fault_history("tie")
        assert store.fault_history(None).id == newest


def check_numeric_name_wins_over_id(url: str) -> None:
    with Store.open(url) as store:
        one = add(store, "a", imported=T0)
        named = add(store, str(one), imported=T0 + 1)  # a history *named* like the other's id
        assert store.fault_history(str(one)).id == named
        assert store.fault_history(f" {one} ").id == one  # not a name: the id
        for not_an_id in ("²", "9" * 30):  # a digit that int() refuses; past any 64-bit id
            with pytest.raises(UnknownHistory, match="; it has: "):
                store.fault_history(not_an_id)


def check_duplicate_name_is_refused(url: str) -> None:
    with Store.open(url) as store:
        hid = add(store, "trace", imported=T0)
        with pytest.raises(HistoryExists, match=r"'trace' is already in .*pass --replace"):
            add(store, "trace", events=SAMPLE[:1], fleet_size=9, imported=T0 + 1)
        rec = store.fault_history("trace")
        assert (rec.id, rec.fleet_size, rec.faults) == (hid, 4, 4)
        assert store.history_events(hid) == sorted(SAMPLE, key=lambda e: (e.node, e.start))
    assert _count_faults(url) == 4  # nothing of the refused import was written
    assert issubclass(HistoryExists, StoreError)


def check_replace(url: str) -> None:
    with Store.open(url) as store:
        old = add(store, "trace", imported=T0)
        other = add(store, "other", imported=T0 + 1)
        new = add(store, "trace", events=SAMPLE[:2], fleet_size=9, replace=True,
                  imported=T0 + 2)
        assert new != old
        rec = store.fault_history("trace")
        assert (rec.id, rec.fleet_size, rec.faults) == (new, 9, 2)
        assert [h.name for h in store.fault_histories()] == ["trace", "other"]
        assert store.history_events(new) == [SAMPLE[1], SAMPLE[0]]
        with pytest.raises(UnknownHistory, match=rf"no fault history with id {old}\b"):
            store.history_events(old)
        assert len(store.history_events(other)) == 4
        # replace with no same-named history is a plain import
        assert add(store, "fresh", replace=True, imported=T0 + 3) > new
    assert _count_faults(url, old) == 0
    assert _count_faults(url) == 2 + 4 + 4


def check_delete_cascades(url: str) -> None:
    with Store.open(url) as store:
        gone = add(store, "gone", imported=T0)
        kept = add(store, "kept", events=SAMPLE[:3], imported=T0 + 1)
        assert store.delete_fault_history("gone") == 4
        assert [h.name for h in store.fault_histories()] == ["kept"]
        with pytest.raises(UnknownHistory, match=r"no fault history 'gone' in .*; it has: kept"):
            store.delete_fault_history("gone")
        assert len(store.history_events(kept)) == 3
    assert _count_faults(url, gone) == 0
    assert _count_faults(url, kept) == 3


def check_empty_history(url: str) -> None:
    with Store.open(url) as store:
        hid = add(store, "quiet", events=(), fleet_size=1, imported=T0)
        rec = store.fault_history("quiet")
        assert (rec.id, rec.faults) == (hid, 0)
        assert store.history_events(hid) == []
        assert store.history_faults(hid) == []
        assert store.delete_fault_history("quiet") == 0
        assert store.fault_histories() == []


def check_unknown_lists_the_names(url: str) -> None:
    with Store.open(url) as store:
        with pytest.raises(UnknownHistory, match=r"no fault histories in .*trainguard history "
                                                 "import"):
            store.fault_history(None)
        with pytest.raises(UnknownHistory, match="no fault histories in "):
            store.fault_history("anything")
        with pytest.raises(UnknownHistory, match="no fault history with id 1 in "):
            store.history_events(1)
        for i in range(23):
            add(store, f"h{i:02d}", events=(), imported=T0 + i)
        with pytest.raises(UnknownHistory) as info:
            store.fault_history("h99")
    message = str(info.value)
    assert "no fault history 'h99' in " in message
    # newest first, at most 20, then how many more
    assert message.endswith("; it has: " + ", ".join(f"h{i:02d}" for i in range(22, 2, -1))
                            + " and 3 more")


def check_bad_histories_are_refused(url: str) -> None:
    with Store.open(url) as store:
        cases: list[tuple[dict[str, Any], type[Exception], str]] = [
            ({"fleet_size": 0}, FleetError, "fleet size must be at least 1"),
            ({"fleet_size": 2.5}, FleetError, "fleet size must be a whole number"),
            ({"window_end": T0}, FleetError, "must be after its start"),
            ({"window_start": float("nan")}, FleetError, "window start must be a finite number"),
            ({"origin": float("inf")}, FleetError, "time origin must be a finite"),
            ({"fleet_size": 1}, FleetError, "2 nodes have faults but the fleet size is 1"),
        ]
        for overrides, error, message in cases:
            with pytest.raises(error, match=message):
                add(store, "bad", **overrides)
        with pytest.raises(StoreError, match="needs a name"):
            add(store, "  ")
        assert store.fault_histories() == []
    assert _count_faults(url) == 0


def check_kept_apart_from_what_trainguard_observed(url: str) -> None:
    with Store.open(url) as store:
        hid = add(store, "trace", imported=T0)
        assert store.events() == []
        assert store.events(host="node-a") == []
        assert store.nodes() == []
        assert store.alerts() == [] and store.exclusions() == []
        assert store.sessions() == [] and store.attempts() == []
        assert store.host_checks() == []
        store.upsert_node("node-a", state="ok", seen=T0)
        store.add_exclusion("node-b", reason="XID 79", created=T0)
        assert len(store.history_events(hid)) == 4  # and the other way round
        assert store.fault_history("trace").faults == 4


def check_readonly_refuses_writes(url: str) -> None:
    with Store.open(url) as store:
        add(store, "trace", imported=T0)
    with Store.open(url, readonly=True) as store:
        with pytest.raises(StoreError, match="opened read-only"):
            add(store, "other")
        with pytest.raises(StoreError, match="opened read-only"):
            store.delete_fault_history("trace")
        assert [h.name for h in store.fault_histories()] == ["trace"]


def check_old_store_without_the_tables(url: str) -> None:
    """A store written before histories existed: readers find none, a writer adds the tables;
    the schema version does not move."""
    with Store.open(url) as store:
        store.upsert_node("node1", state="ok", seen=T0)
        version = store.schema_version()
    engine = sa.create_engine(resolve_db_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE history_faults"))
            conn.execute(sa.text("DROP TABLE fault_histories"))
    finally:
        engine.dispose()
    with Store.open(url, readonly=True) as store:
        assert store.fault_histories() == []
        with pytest.raises(UnknownHistory, match="no fault histories in "):
            store.fault_history(None)
        with pytest.raises(UnknownHistory, match="no fault history with id 1 in "):
            store.history_events(1)
        assert [n.name for n in store.nodes()] == ["node1"]
    with Store.open(url) as store:
        assert store.schema_version() == version
        hid = add(store, "trace", imported=T0)
    with Store.open(url, readonly=True) as store:
        assert len(store.history_events(hid)) == 4


def many_faults(n: int, nodes: int = 300, seed: int = 29) -> list[FaultEvent]:
    """``n`` faults over a year on ``nodes`` nodes, in random order, one in ten still open."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        start = T0 + rng.uniform(0, 365 * DAY)
        end = None if i % 10 == 0 else start + rng.expovariate(1 / 7200)
        events.append(FaultEvent(f"node-{rng.randrange(nodes):03d}", start, end,
                                 f"Hardware Failure / GPU / kind {i % 17}", "gpu"))
    return events


def check_ten_thousand_faults(url: str) -> None:
    events = many_faults(10_000)
    with Store.open(url) as store:
        hid = add(store, "big", events=events, fleet_size=300, window_end=T0 + 366 * DAY)
        assert store.fault_history("big").faults == 10_000
        got = store.history_faults(hid)
    assert got == sorted(faults_of(events), key=lambda fl: (fl[0].node, fl[0].start))


CHECKS: list[Check] = [
    check_round_trip,
    check_lines_may_be_absent,
    check_newest_first,
    check_numeric_name_wins_over_id,
    check_duplicate_name_is_refused,
    check_replace,
    check_delete_cascades,
    check_empty_history,
    check_unknown_lists_the_names,
    check_bad_histories_are_refused,
    check_kept_apart_from_what_trainguard_observed,
    check_readonly_refuses_writes,
    check_old_store_without_the_tables,
    check_ten_thousand_faults,
]


def check_id(check: Check) -> str:
    return check.__name__.removeprefix("check_")
