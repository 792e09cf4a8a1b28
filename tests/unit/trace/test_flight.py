"""Flight-recorder dumps: real gloo dumps (tests/data/flight, see its README) and the documented
NCCL format, parsed into RankStates; bad and hostile files refused with one clear line."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from trainguard.errors import TraceError
from trainguard.trace.flight import (
    SOURCE,
    FlightDump,
    parse_dump,
    read_dump,
    read_dumps,
)
from trainguard.trace.model import WORLD

DATA = Path(__file__).resolve().parents[2] / "data" / "flight"
CASES = {"healthy": 2, "healthy_json": 2, "hang": 3, "hang_json": 3, "mismatch": 2}


def groups(dump: FlightDump) -> dict[str, tuple[int, int, bool]]:
    return {name: (g.entered_seq, g.completed_seq, g.inside)
            for name, g in dump.rank_state().groups.items()}


# --- real gloo dumps -------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_every_real_dump_parses(case: str) -> None:
    dumps = read_dumps(DATA / case)
    assert [d.rank for d in dumps] == list(range(CASES[case]))
    for d in dumps:
        assert d.version == "2.10"
        assert d.entries
        assert all(e.profiling_name.startswith("gloo:") for e in d.entries)
        assert all(e.state == "scheduled" for e in d.entries)  # gloo records no events
        assert not any(e.is_p2p for e in d.entries)  # nor sends/receives
        assert d.pg_config == {}  # gloo's only pg_config item has no name
        times = [c.entered for c in d.calls]
        assert all(t is not None and 1.6e9 < t < 4.1e9 for t in times)
        assert times == sorted(times)  # type: ignore[type-var]
        state = d.rank_state()
        assert state.source == SOURCE == "flight-recorder"
        assert state.rank == d.rank
        assert state.updated == d.written
        json.dumps(state.to_dict())


def test_healthy_run_every_rank_done_with_every_collective() -> None:
    for d in read_dumps(DATA / "healthy"):
        assert groups(d) == {WORLD: (5, 5, False), "1": (1, 1, False)}
        assert d.group_descs == {WORLD: "default_pg", "1": "dp"}
        assert [(c.group, c.seq, c.op, c.nbytes) for c in d.calls] == [
            (WORLD, 1, "all_reduce", 16),       # 4 x float32
            ("1", 1, "all_reduce", 16),
            (WORLD, 2, "all_gather", 24),       # 3 x int64
            (WORLD, 3, "broadcast", 12),        # 2 x 3 bfloat16
            (WORLD, 4, "all_reduce", 16),
            (WORLD, 5, "barrier", 0),
        ]
        last = d.rank_state().groups[WORLD].last
        assert last is not None and last.op == "barrier" and last.completed


def test_gloo_async_work_not_yet_retired_still_counts_as_done() -> None:
    # In this real dump rank 0 had not yet retired its async all_reduce (seq 4) though the
    # barrier after it (seq 5) had: the rank is not inside anything.
    d = read_dump(DATA / "healthy" / "nccl_trace_rank_0")
    seq4 = [e for e in d.entries if e.call.group == WORLD and e.collective_seq == 4]
    assert len(seq4) == 1 and not seq4[0].retired and not seq4[0].completed
    assert not seq4[0].call.completed
    assert groups(d)[WORLD] == (5, 5, False)


@pytest.mark.parametrize("case", ["hang", "hang_json"])
def test_hang_shows_rank_2_behind(case: str) -> None:
    r0, r1, r2 = read_dumps(DATA / case)
    for waiting in (r0, r1):
        assert groups(waiting) == {WORLD: (6, 5, True), "1": (1, 1, False)}
        last = waiting.rank_state().groups[WORLD].last
        assert last is not None and last.op == "all_reduce" and not last.completed
        assert last.seq == 6 and last.ended is None
        assert waiting.group_descs["1"] == "pair"
    assert groups(r2) == {WORLD: (5, 5, False)}


def test_pickle_and_json_dumps_of_one_moment_agree() -> None:
    for case in ("healthy", "hang"):
        for p, j in zip(read_dumps(DATA / case), read_dumps(DATA / f"{case}_json"), strict=True):
            assert groups(p) == groups(j)
            assert [(c.group, c.seq, c.op, c.nbytes, c.entered) for c in p.calls] == [
                (c.group, c.seq, c.op, c.nbytes, c.entered) for c in j.calls]


def test_mismatch_both_ranks_inside_seq_3_with_different_ops() -> None:
    r0, r1 = read_dumps(DATA / "mismatch")
    assert groups(r0) == groups(r1) == {WORLD: (3, 2, True)}
    ops = [d.rank_state().groups[WORLD].last for d in (r0, r1)]
    assert [c.op for c in ops if c is not None] == ["broadcast", "all_reduce"]


def test_recent_keeps_the_last_calls_oldest_first() -> None:
    d = read_dump(DATA / "hang" / "nccl_trace_rank_0")
    assert [c.seq for c in d.rank_state(recent=2).recent] == [5, 6]
    assert d.rank_state(recent=0).recent == ()
    assert len(d.rank_state().recent) == len(d.entries) == 7


# --- the documented NCCL format (no NCCL here: built from the format PyTorch documents) --------

def nccl_entry(i: int, seq: int, name: str = "nccl:all_reduce", *, state: str = "completed",
               retired: bool = True, pg: tuple[str, str] = ("0", "default_pg"), p2p: int = 0,
               is_p2p: bool = False, sizes: Any = ((3, 4),), dtypes: Any = ("Float",),
               ) -> dict[str, Any]:
    t0 = 1_724_779_239_936_775_119 + i * 1_000_000
    return {
        "frames": [{"name": "train", "filename": "train.py", "line": 3}],
        "record_id": i, "pg_id": int(pg[0]), "process_group": pg, "collective_seq_id": seq,
        "p2p_seq_id": p2p, "op_id": i + 1, "profiling_name": name, "time_created_ns": t0,
        "input_sizes": [list(s) for s in sizes], "input_dtypes": list(dtypes),
        "output_sizes": [list(s) for s in sizes], "output_dtypes": list(dtypes), "state": state,
        "time_discovered_started_ns": t0 + 1000 if state != "scheduled" else None,
        "time_discovered_completed_ns": t0 + 2000 if state == "completed" else None,
        "retired": retired, "timeout_ms": 600000, "is_p2p": is_p2p,
        "thread_id": "1", "thread_name": "pt_main",
    }


def nccl_dump(entries: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"version": "2.10", "comm_lib_version": "2.21.5",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                          "3": {"name": "3", "desc": "mesh_tp", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                                "last_completed_collective": 2}},
            "entries": entries, **extra}


def test_nccl_timed_out_collective_is_where_the_rank_is_stuck() -> None:
    d = parse_dump(nccl_dump([
        nccl_entry(0, 1),
        nccl_entry(1, 2, "nccl:_allgather_base"),
        nccl_entry(2, 2, "nccl:send 0->1", p2p=1, is_p2p=True),
        nccl_entry(3, 3, state="started", retired=True),           # timed out: retired, not done
        nccl_entry(4, 1, "nccl:reduce_scatter", pg=("3", "mesh_tp"), state="scheduled",
                   retired=False, sizes=((8,),), dtypes=("BFloat16",)),
    ]), rank=0)
    assert d.pg_config == {WORLD: (0, 1, 2, 3), "3": (0, 1)}
    assert d.group_descs == {WORLD: "default_pg", "3": "mesh_tp"}
    assert d.comm_lib_version == "2.21.5"
    assert groups(d) == {WORLD: (3, 2, True), "3": (1, 0, True)}
    send = d.entries[2].call
    assert (send.op, send.seq, send.group, send.nbytes) == ("send", 1, WORLD, 48)
    stuck = d.entries[3]
    assert stuck.state == "started" and stuck.retired and not stuck.completed
    assert stuck.call.started is not None and stuck.call.ended is None
    assert stuck.timeout_s == 600.0
    first = d.entries[0].call
    assert first.group_size == 4 and first.nbytes == 48 and first.completed
    assert first.entered == pytest.approx(1_724_779_239.936775)
    assert first.ended == pytest.approx(first.entered + 2e-6)  # type: ignore[operator]
    rs = d.entries[4].call
    assert (rs.op, rs.group, rs.group_size, rs.nbytes) == ("reduce_scatter", "3", 2, 16)


def test_only_active_dump_puts_completed_just_below_the_oldest_pending() -> None:
    d = parse_dump(nccl_dump([nccl_entry(0, 41, state="started", retired=False),
                              nccl_entry(1, 42, state="scheduled", retired=False)]), rank=1)
    assert groups(d) == {WORLD: (42, 40, True)}


def test_dump_with_recording_off_has_no_entries() -> None:
    # What _dump_fr_trace_json() gives with TORCH_FR_BUFFER_SIZE=0: no "entries" key at all.
    d = parse_dump({"version": "2.10", "comm_lib_version": "", "nccl_comm_state": {},
                    "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
                    "pg_status": {}}, rank=0)
    assert d.entries == () and d.pg_config == {} and d.rank_state().groups == {}


def test_p2p_only_group_has_no_collective_state() -> None:
    d = parse_dump(nccl_dump([nccl_entry(0, 0, "nccl:recv 1<-0", p2p=1, is_p2p=True)]), rank=1)
    assert groups(d) == {}
    assert d.rank_state().recent[0].op == "recv"


@pytest.mark.parametrize(("dtypes", "sizes", "nbytes"), [
    (("Float", "Half"), ((2, 2), (3,)), 22),
    (("ComplexDouble",), ((1,),), 16),
    (("Float8_e4m3fn",), ((7,),), 7),
    (("MadeUpType",), ((4,),), 0),     # unknown dtype: unknown size, not an undercount
    (("Float",), ((4,), (4,)), 0),     # lists disagree
    ((), (), 0),
])
def test_nbytes_from_sizes_and_dtypes(dtypes: tuple[str, ...], sizes: Any, nbytes: int) -> None:
    d = parse_dump(nccl_dump([nccl_entry(0, 1, sizes=sizes, dtypes=dtypes)]), rank=0)
    assert d.entries[0].call.nbytes == nbytes


# --- rank, files, directories ------------------------------------------------------------------

def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_rank_from_the_dump_wins_over_the_file_name(tmp_path: Path) -> None:
    p = write_json(tmp_path / "trace_7.json", nccl_dump([nccl_entry(0, 1)], rank=3))
    assert read_dump(p).rank == 3
    assert read_dump(p, rank=5).rank == 5
    q = write_json(tmp_path / "trace_7.json", nccl_dump([nccl_entry(0, 1)]))
    assert read_dump(q).rank == 7


def test_no_rank_anywhere_is_an_error(tmp_path: Path) -> None:
    p = write_json(tmp_path / "dump.json", nccl_dump([]))
    with pytest.raises(TraceError, match=r"dump\.json: cannot tell the rank"):
        read_dump(p)


def test_directory_of_dumps_ignores_other_files(tmp_path: Path) -> None:
    for r in (1, 0):
        shutil.copy(DATA / "hang" / f"nccl_trace_rank_{r}", tmp_path)
    (tmp_path / "README.md").write_text("notes")
    (tmp_path / "nccl_trace_rank_2.tmp").write_bytes(b"half")
    (tmp_path / ".nccl_trace_rank_3").write_bytes(b"hidden")
    assert [d.rank for d in read_dumps(tmp_path)] == [0, 1]
    assert [d.rank for d in read_dumps([tmp_path / "nccl_trace_rank_1"])] == [1]
    assert [d.rank for d in read_dumps(tmp_path / "nccl_trace_rank_0")] == [0]


def test_directory_prefix_selects_one_job(tmp_path: Path) -> None:
    shutil.copy(DATA / "hang" / "nccl_trace_rank_0", tmp_path / "jobA_0")
    shutil.copy(DATA / "hang" / "nccl_trace_rank_0", tmp_path / "jobB_0")
    with pytest.raises(TraceError, match="rank 0 has two dumps"):
        read_dumps(tmp_path)
    assert [Path(d.path).name for d in read_dumps(tmp_path, prefix="jobB_")] == ["jobB_0"]
    with pytest.raises(TraceError, match=r"no flight-recorder dumps \(files named jobC_<rank>\)"):
        read_dumps(tmp_path, prefix="jobC_")


def test_pickle_and_json_of_one_rank_side_by_side_are_duplicates(tmp_path: Path) -> None:
    shutil.copy(DATA / "hang" / "nccl_trace_rank_0", tmp_path)
    shutil.copy(DATA / "hang_json" / "nccl_trace_rank_0.json", tmp_path)
    with pytest.raises(TraceError, match=r"rank 0 has two dumps: .*nccl_trace_rank_0 and "):
        read_dumps(tmp_path)


@pytest.mark.parametrize("make", ["empty_dir", "missing", "empty_list"])
def test_nothing_to_read(tmp_path: Path, make: str) -> None:
    src: Any = {"empty_dir": tmp_path, "missing": tmp_path / "nope", "empty_list": []}[make]
    with pytest.raises(TraceError, match="no "):
        read_dumps(src)


# --- bad and hostile input -------------------------------------------------------------------

def real_bytes() -> bytes:
    return (DATA / "hang" / "nccl_trace_rank_0").read_bytes()


@pytest.mark.parametrize(("name", "content", "message"), [
    ("empty_0", b"", "empty file"),
    ("blank_0", b"  \n", "empty file"),
    ("truncated_0", real_bytes()[: len(real_bytes()) // 2], "unreadable pickle, truncated"),
    ("proto_only_0", b"\x80\x02", "unreadable pickle"),
    ("random_0", bytes(random.Random(8).randrange(256) for _ in range(512)), "neither a pickle"),
    ("text_0", b"hello world", "neither a pickle nor JSON"),
    ("badjson_0.json", b'{"version": "2.10", "entries": [', "not valid JSON"),
    ("list_0.json", b"[1, 2]", "got list"),
    ("noversion_0.json", b'{"entries": []}', "no 'version'"),
    ("v3_0.json", b'{"version": "3.0", "entries": []}', "version '3.0' is not supported"),
    ("vweird_0.json", b'{"version": "latest"}', "version 'latest' is not supported"),
    ("entries_0.json", b'{"version": "2.10", "entries": {}}', "entries must be a list"),
    ("entry_0.json", b'{"version": "2.10", "entries": [7]}', r"entries\[0\] must be an object"),
    ("pickled_int_0", pickle.dumps(42, protocol=2), "got int"),
])
def test_bad_file_gives_one_line_naming_it(tmp_path: Path, name: str, content: bytes,
                                           message: str) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        read_dump(p)
    text = str(info.value)
    assert text.startswith(str(p)) and "\n" not in text


@pytest.mark.parametrize(("field", "value", "message"), [
    ("collective_seq_id", None, r"entries\[0\]\.collective_seq_id must be an integer"),
    ("collective_seq_id", True, r"collective_seq_id must be an integer"),
    ("process_group", "0", r"process_group must be \[name, desc\]"),
    ("profiling_name", 3, r"profiling_name must be a string"),
    ("state", "exploded", r"state must be one of"),
    ("retired", "yes", r"retired must be true or false"),
    ("input_sizes", [3], r"input_sizes\[0\] must be a shape"),
    ("input_dtypes", "Float", r"input_dtypes must be a list of strings"),
    ("time_created_ns", "now", r"time_created_ns must be an integer"),
])
def test_malformed_entry_names_the_field(tmp_path: Path, field: str, value: Any,
                                         message: str) -> None:
    entry = nccl_entry(0, 1)
    entry[field] = value
    p = write_json(tmp_path / "trace_0.json", nccl_dump([entry]))
    with pytest.raises(TraceError, match=message):
        read_dump(p)


def test_bad_pg_config_ranks(tmp_path: Path) -> None:
    data = nccl_dump([nccl_entry(0, 1)])
    data["pg_config"]["0"]["ranks"] = "__import__('os')"
    with pytest.raises(TraceError, match=r"pg_config\['0'\]\.ranks must be a list of ranks"):
        read_dump(write_json(tmp_path / "trace_0.json", data))


class _Exploit:
    """Pickles into a call of os.system: what a crafted dump would do to a plain pickle.load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_that_calls_os_system_is_refused(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Exploit(marker)]},
                               protocol=protocol))
    with pytest.raises(TraceError, match=r"refused to unpickle: it asks for (posix|os|nt)\.system"):
        read_dump(p)
    assert not marker.exists()


def test_pickle_asking_for_any_class_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": {1, 2}}, protocol=2))
    with pytest.raises(TraceError, match=r"asks for (__builtin__|builtins)\.set"):
        read_dump(p)


def test_unreadable_path(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nccl_trace_rank_0: cannot read flight-recorder dump"):
        read_dump(tmp_path / "nccl_trace_rank_0")


# --- bounded and depth-guarded reading -----------------------------------------------------------

def _unicode(s: str) -> bytes:
    return b"X" + len(s.encode()).to_bytes(4, "little") + s.encode()


def _pickled_dump_with_rank(value: bytes) -> bytes:
    """A protocol-2 pickle of {"version": "2.10", "rank": <value opcodes>}, written by hand so
    that the value can be deeper than `pickle.dumps` itself could recurse."""
    return (b"\x80\x02}" + _unicode("version") + _unicode("2.10") + b"s" + _unicode("rank")
            + value + b"s.")


def _deep_list(n: int) -> bytes:
    return b"]" * n + b"a" * (n - 1)  # n empty lists, each appended into the one before


@pytest.mark.parametrize(("name", "content", "message"), [
    ("deep_0.json", b'{"version": "2.10", "rank": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "JSON nested too deeply"),
    ("deep40_0.json", b'{"version": "2.10", "rank": ' + b"[" * 40 + b"]" * 40 + b"}",
     "nested deeper than 32 levels"),
    ("nccl_trace_rank_0", _pickled_dump_with_rank(_deep_list(100_000)),
     "nested deeper than 32 levels"),
    # A list that contains itself: nesting without end.
    ("nccl_trace_rank_1", _pickled_dump_with_rank(b"]q\x00h\x00a"), "nested deeper than 32"),
])
def test_deep_nesting_is_one_clear_error(tmp_path: Path, name: str, content: bytes,
                                         message: str) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        read_dump(p)
    assert str(info.value).startswith(str(p))


def test_shared_containers_are_walked_once_per_depth(tmp_path: Path) -> None:
    # 2**24 paths through 25 shared lists: a walk that followed every path would not finish.
    node: list[Any] = []
    for _ in range(24):
        node = [node, node]
    data = nccl_dump([nccl_entry(0, 1)], rank=0, extra_field=node)
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps(data, protocol=4))
    assert read_dump(p).rank == 0


def test_dump_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    p = write_json(tmp_path / "trace_0.json", nccl_dump([nccl_entry(0, 1)]))
    size = p.stat().st_size
    assert read_dump(p, max_bytes=size).rank == 0
    with pytest.raises(TraceError, match=r"trace_0.json: cannot read flight-recorder dump "
                                         r"\(larger than"):
        read_dump(p, max_bytes=size - 1)


def test_device_is_refused_without_reading_it() -> None:
    with pytest.raises(TraceError, match=r"/dev/zero: cannot read flight-recorder dump \(not a "
                                         r"regular file \(a character device\)\)"):
        read_dump("/dev/zero", rank=0)


class _ExecGadget:
    """Pickles into builtins.exec of a statement that creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("protocol", [2, 5])
def test_pickle_that_calls_builtins_exec_is_refused(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": _ExecGadget(marker)},
                               protocol=protocol))
    with pytest.raises(TraceError, match=r"refused to unpickle: it asks for "
                                         r"(__builtin__|builtins)\.exec"):
        read_dump(p)
    assert not marker.exists()


def test_even_harmless_globals_are_refused(tmp_path: Path) -> None:
    from collections import OrderedDict

    from trainguard.trace.dumpload import ALLOWED_GLOBALS

    assert not ALLOWED_GLOBALS  # an exact allowlist, and a dump needs none
    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": OrderedDict()},
                               protocol=2))
    with pytest.raises(TraceError, match=r"asks for collections\.OrderedDict"):
        read_dump(p)
