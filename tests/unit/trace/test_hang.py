"""Hang localization from per-rank collective states (pure)."""

from __future__ import annotations

from trainguard.trace.hang import HangKind, RankPlace, localize_hang, stack_collective, stack_top
from trainguard.trace.model import CollectiveCall, GroupState, RankState


def _g(entered: int, completed: int, op: str = "all_reduce", group: str = "world") -> GroupState:
    return GroupState(group, entered, completed,
                      CollectiveCall(entered, op, group, 4, 64, 1.0, None,
                                     None if completed < entered else 2.0))


def _st(rank: int, *groups: GroupState, step: int | None = 10,
        span: str | None = None) -> RankState:
    return RankState(rank, {g.group: g for g in groups}, step=step, span=span)


PLACES = {r: RankPlace(r, f"node{r // 2}", r % 2, str(r % 2), 1000 + r) for r in range(4)}

FAULTHANDLER = """Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1000 in _bootstrap

Current thread 0x00007f02 (most recent call first):
  File "/home/user/train.py", line 12 in slow_io
  File "/home/user/train.py", line 40 in main
  File "/home/user/train.py", line 50 in <module>
"""


def test_the_rank_that_never_entered_is_named_with_host_gpu_and_collective() -> None:
    states = {0: _st(0, _g(915, 914, "all_gather")), 1: _st(1, _g(914, 914, "barrier"), step=9),
              2: _st(2, _g(915, 914, "all_gather")), 3: _st(3, _g(915, 914, "all_gather"))}
    places = dict(PLACES)
    places[1] = RankPlace(1, "node0", 1, "1", 1001, "stopped", None)
    d = localize_hang(states, places, {"node0": ["XID 79 on GPU 1"]})
    assert d.kind is HangKind.MISSING and d.definitive
    assert (d.group, d.op, d.seq, d.waiting) == ("world", "all_gather", 915, (0, 2, 3))
    [c] = d.culprits
    assert (c.rank, c.node, c.local_rank, c.gpu, c.pid) == (1, "node0", 1, "1", 1001)
    assert "SIGSTOP" in c.reason and c.last_completed == "barrier #914" and c.step == 9
    assert c.node_evidence == ("XID 79 on GPU 1",)
    assert d.culprit_nodes == ("node0",)
    assert d.summary.startswith("rank 1 on node0 never entered all_gather #915 (group world)")


def test_a_broadcast_root_stuck_behind_the_sleeper_is_not_the_root() -> None:
    # rank 0 (the broadcast source) still sends #248 to rank 2; 1 and 3 got theirs and wait in
    # #249; rank 2 sleeps in its step, last at #247 (a real gloo case).
    states = {0: _st(0, _g(248, 247, "broadcast_coalesced"), span="forward"),
              1: _st(1, _g(249, 248, "all_gather")), 2: _st(2, _g(247, 247, "all_gather")),
              3: _st(3, _g(249, 248, "all_gather"))}
    places = dict(PLACES)
    places[2] = RankPlace(2, "node1", 0, "0", 1002, "running", FAULTHANDLER)
    d = localize_hang(states, places)
    assert [c.rank for c in d.culprits] == [2, 0]
    assert d.culprits[0].stack_top[0] == 'File "/home/user/train.py", line 12 in slow_io'
    assert "waits in broadcast_coalesced #248" in d.culprits[1].reason
    assert d.summary.startswith("rank 2 on node1 never entered all_gather #249")


def test_a_cross_group_deadlock_names_the_rank_waiting_elsewhere() -> None:
    # world #20: ranks 0, 1, 2 wait; rank 3 waits in pp #7 for rank 0, which waits in world:
    # a deadlock by call order.
    states = {0: _st(0, _g(20, 19), _g(6, 6, "send", "pp")),
              1: _st(1, _g(20, 19)), 2: _st(2, _g(20, 19)),
              3: _st(3, _g(19, 19), _g(7, 6, "recv", "pp"))}
    d = localize_hang(states, PLACES)
    assert [c.rank for c in d.culprits] == [3]
    assert "waits in recv #7 (group pp)" in d.culprits[0].reason


def test_a_subgroup_hang_follows_the_chain_to_the_root() -> None:
    # no world collective in flight: tp {0, 1} #5 has rank 0 waiting, rank 1 waits in pp
    # {1, 2} #3, which rank 2 never entered (it computes).
    states = {0: _st(0, _g(5, 4, "all_reduce", "tp")),
              1: _st(1, _g(4, 4, "all_reduce", "tp"), _g(3, 2, "recv", "pp")),
              2: _st(2, _g(2, 2, "send", "pp"), span="forward")}
    places = {r: PLACES[r] for r in range(3)}
    d = localize_hang(states, places)
    assert d.kind is HangKind.MISSING
    assert d.culprits[0].rank == 2
    assert "which rank 1 waits in" in d.culprits[0].reason


def test_everyone_inside_the_same_collective_is_a_stuck_collective() -> None:
    states = {r: _st(r, _g(50, 49)) for r in range(4)}
    d = localize_hang(states, PLACES, {"node1": ["NIC link down"]})
    assert d.kind is HangKind.STUCK and not d.definitive
    assert {c.node for c in d.culprits} == {"node1"}
    assert "node(s) with evidence: node1" in d.summary


def test_different_ops_at_the_same_seq_is_a_desync() -> None:
    states = {0: _st(0, _g(3, 2, "broadcast")), 1: _st(1, _g(3, 2, "all_reduce")),
              2: _st(2, _g(3, 2, "all_reduce")), 3: _st(3, _g(3, 2, "all_reduce"))}
    d = localize_hang(states, PLACES)
    assert d.kind is HangKind.MISMATCH and [c.rank for c in d.culprits] == [0]
    assert "diverged" in d.summary


def test_nobody_in_a_collective_names_the_stopped_or_the_rank_behind() -> None:
    states = {r: _st(r, _g(9, 9), step=100 if r != 2 else 99) for r in range(4)}
    d = localize_hang(states, PLACES)
    assert d.kind is HangKind.OUTSIDE and [c.rank for c in d.culprits] == [2]
    places = dict(PLACES)
    places[3] = RankPlace(3, "node1", 1, "1", 1003, "disk-sleep")
    d = localize_hang(states, places)
    assert [c.rank for c in d.culprits] == [3] and "uninterruptible" in d.culprits[0].reason


def test_a_rank_without_state_is_noted_and_counted_as_not_entered() -> None:
    states = {0: _st(0, _g(4, 3)), 1: None, 2: _st(2, _g(4, 3)), 3: _st(3, _g(4, 3))}
    d = localize_hang(states, PLACES)
    assert [c.rank for c in d.culprits] == [1]
    assert "no collective state from rank(s) 1" in d.notes and d.sources[1] == "none"


def test_no_state_at_all_is_unknown() -> None:
    d = localize_hang({0: None, 1: None}, {0: PLACES[0], 1: PLACES[1]})
    assert d.kind is HangKind.UNKNOWN and not d.culprits


def test_stack_top_reads_faulthandler_and_py_spy() -> None:
    assert stack_top(FAULTHANDLER)[-1] == 'File "/home/user/train.py", line 50 in <module>'
    spy = ('Process 12: python train.py\nPython v3.11\n\nThread 12 (idle): "MainThread"\n'
           "    sleep (time.py:1)\n    step (session.py:228)\n    <module> (train.py:9)\n")
    assert stack_top(spy) == ("sleep (time.py:1)", "step (session.py:228)",
                              "<module> (train.py:9)")
    assert stack_top(None) == () and stack_top("garbage") == ()


def test_a_rank_stopped_inside_an_earlier_collective_is_the_root() -> None:
    # rank 1 was SIGSTOPped while receiving broadcast #150; ranks 0 and 2 got past it
    states = {0: _st(0, _g(151, 150, "all_gather")),
              1: _st(1, _g(150, 149, "broadcast_coalesced")),
              2: _st(2, _g(151, 150, "all_gather"))}
    places = {r: PLACES[r] for r in range(3)}
    places[1] = RankPlace(1, "node0", 1, "1", 1001, "stopped")
    d = localize_hang(states, places)
    [c] = d.culprits
    assert c.rank == 1 and "stopped inside broadcast_coalesced #150" in c.reason
    assert "SIGSTOP" in c.reason


def test_a_rank_that_finished_is_not_a_culprit_the_stopped_one_is() -> None:
    places = {0: RankPlace(0, "node0", 0, "0", 1000, "finished"),
              1: RankPlace(1, "node1", 0, "0", 1001, "stopped")}
    d = localize_hang({0: None, 1: None}, places)
    assert d.kind is HangKind.UNKNOWN and [c.rank for c in d.culprits] == [1]
    assert "SIGSTOP" in d.summary


PYSPY_WAITING = ('Thread 9 (idle): "MainThread"\n'
                 "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n"
                 "    wrapper (torch/distributed/c10d_logger.py:83)\n"
                 "    main (train.py:20)\n    <module> (train.py:30)\n")
PYSPY_SLEEPING = ('Thread 9 (idle): "MainThread"\n    load_batch (train.py:12)\n'
                  "    main (train.py:18)\n    <module> (train.py:30)\n")
FAULTHANDLER_WAITING = ('Current thread 0x1 (most recent call first):\n'
                        '  File "/x/torch/distributed/distributed_c10d.py", line 4100 in barrier\n'
                        '  File "/w/train.py", line 9 in <module>\n')


def test_stack_collective_reads_both_formats() -> None:
    assert stack_collective(PYSPY_WAITING) == "all_reduce"
    assert stack_collective(FAULTHANDLER_WAITING) == "barrier"
    assert stack_collective(PYSPY_SLEEPING) is None and stack_collective(None) is None


def test_without_sdk_state_the_stacks_name_the_rank_outside_the_collective() -> None:
    places = {0: RankPlace(0, "n0", 0, "0", 10, "running", PYSPY_WAITING),
              1: RankPlace(1, "n1", 0, "0", 11, "running", PYSPY_SLEEPING),
              2: RankPlace(2, "n2", 0, "0", 12, "running", PYSPY_WAITING)}
    d = localize_hang({0: None, 1: None, 2: None}, places)
    assert d.kind is HangKind.MISSING and d.op == "all_reduce" and d.waiting == (0, 2)
    assert [c.rank for c in d.culprits] == [1] and d.culprits[0].node == "n1"
    assert d.culprits[0].stack_top[0] == "load_batch (train.py:12)"


def test_a_rank_stopped_inside_the_collective_everyone_entered_is_named_first() -> None:
    states = {r: _st(r, _g(50, 49, "all_gather")) for r in range(3)}
    places = {r: PLACES[r] for r in range(3)}
    places[1] = RankPlace(1, "node0", 1, "1", 1001, "stopped")
    d = localize_hang(states, places)
    assert d.kind is HangKind.STUCK and d.definitive and [c.rank for c in d.culprits] == [1]
    assert d.summary.startswith("rank 1 on node0: its process is stopped (SIGSTOP), inside "
                                "all_gather #50 (group world)")
