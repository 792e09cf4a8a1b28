"""Read PyTorch flight-recorder dumps into the same facts the SDK's state files give.

PyTorch's flight recorder keeps the last ``TORCH_FR_BUFFER_SIZE`` collectives of each process in
a ring buffer and writes them out on a collective timeout (NCCL, ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``)
or on demand (``torch._C._distributed_c10d._dump_fr_trace()``, any backend that records, gloo
included). One file per rank, named ``<prefix><rank>`` (default ``/tmp/nccl_trace_rank_<rank>``),
as a pickle or, from ``_dump_fr_trace_json()``, as JSON::

    {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
     "entries": [{"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
                  "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1, "is_p2p": False,
                  "profiling_name": "nccl:all_reduce", "time_created_ns": 1724779239936775119,
                  "input_sizes": [[3, 4]], "input_dtypes": ["Float"], "state": "completed",
                  "time_discovered_started_ns": None,
                  "time_discovered_completed_ns": 1724779239975811724,
                  "retired": True, "timeout_ms": 600000, ...}, ...], ...}

`read_dump` parses one file, `read_dumps` a directory of them, and `FlightDump.rank_state` turns
a dump into a `RankState` the hang localizer compares across ranks. A dump comes from disk, so it
is read defensively: a regular file of at most `MAX_DUMP_BYTES`; a pickle through an unpickler
whose allowlist of globals (`ALLOWED_GLOBALS`) is empty, since a dump is plain data, so a crafted
dump cannot reach ``os.system`` or ``builtins.exec``; and JSON or pickle, nothing nested deeper
than `MAX_DEPTH` (a deep document would otherwise end in a `RecursionError`).

What counts as *completed* depends on the backend:

1. NCCL watches CUDA events: an entry is completed once its state is ``completed``; an entry
   that is ``retired`` without being completed timed out (the rank is still stuck in it).
2. Gloo records no events, so its state stays ``scheduled``; ``retired`` is set when the work
   finished. A gloo entry counts as completed once retired (a collective that failed with a
   timeout is retired too: dump before the timeout fires to see who is inside).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainguard.errors import TraceError
from trainguard.fileread import UnreadableFile, read_bounded
from trainguard.trace.dumpload import ALLOWED_GLOBALS, MAX_DEPTH, load_dump
from trainguard.trace.model import WORLD, CollectiveCall, GroupState, RankState

SOURCE = "flight-recorder"
"""`RankState.source` of the states read from a dump."""
DEFAULT_PREFIX = "nccl_trace_rank_"
"""PyTorch's file name prefix (``TORCH_FR_DUMP_TEMP_FILE``, formerly
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, defaults to ``/tmp/nccl_trace_rank_``)."""
SUPPORTED_MAJOR = 2
"""The dump format's major version this reader understands (PyTorch bumps it when it changes the
meaning of an existing field; minor versions only add fields)."""
DEFAULT_PG_DESC = "default_pg"
MAX_DUMP_BYTES = 256 << 20
"""Largest dump file read. PyTorch keeps ``TORCH_FR_BUFFER_SIZE`` entries (2,000 by default) of
a few KB each with their stack frames, so a dump is a few MB, tens with a large buffer."""

_EVENTLESS_BACKENDS = frozenset({"gloo"})
"""Backends whose entries never leave ``scheduled``: for them ``retired`` means finished."""

_ITEMSIZE = {
    "Byte": 1, "Char": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "Float8_e5m2": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2fnuz": 1, "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2,
    "Int": 4, "Float": 4, "QInt32": 4, "ComplexHalf": 4, "UInt32": 4,
    "Long": 8, "Double": 8, "ComplexFloat": 8, "UInt64": 8,
    "ComplexDouble": 16,
}
"""Bytes per element by c10's ScalarType name, as the dump spells ``input_dtypes``."""

_RANK_IN_NAME = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_VERSION = re.compile(r"^(\d+)\.(\d+)$")
_STATES = frozenset({"scheduled", "started", "completed"})


@dataclass(frozen=True, slots=True)
class FlightEntry:
    """One record of a rank's flight-recorder ring buffer.

    ``call`` is the record as a `CollectiveCall`: ``seq`` is the ``collective_seq_id`` (the
    ``p2p_seq_id`` for a send or receive), ``op`` the profiling name without its backend prefix,
    ``group`` the process group's name (`WORLD` for the default group). Gloo records no
    completion time: a finished gloo entry gets ``call.ended = call.entered`` (a lower bound), so
    that ``call.completed`` holds.
    """

    call: CollectiveCall
    record_id: int
    pg_id: int
    group_desc: str
    profiling_name: str
    """``nccl:all_reduce``, ``gloo:broadcast``, ``nccl:send 0->1`` ..."""
    state: str
    """``scheduled``, ``started`` or ``completed``, as the recorder saw it."""
    retired: bool
    """The backend no longer tracks the work (finished, or timed out for NCCL)."""
    is_p2p: bool
    collective_seq: int
    p2p_seq: int
    op_id: int
    timeout_s: float | None = None
    input_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()

    @property
    def backend(self) -> str:
        """``nccl``, ``gloo`` ... (the profiling name's prefix)."""
        return _backend(self.profiling_name)

    @property
    def completed(self) -> bool:
        """Finished on this rank (see the module docstring for the per-backend rule)."""
        return _finished(self.state, self.retired, self.backend)


def _backend(profiling_name: str) -> str:
    return profiling_name.partition(":")[0] if ":" in profiling_name else ""


def _finished(state: str, retired: bool, backend: str) -> bool:
    return state == "completed" or (retired and backend in _EVENTLESS_BACKENDS)


@dataclass(frozen=True, slots=True)
class FlightDump:
    """One rank's flight-recorder dump.

    >>> dump = read_dump("/tmp/nccl_trace_rank_3")          # doctest: +SKIP
    >>> dump.rank_state().groups["world"].entered_seq       # doctest: +SKIP
    412
    """

    rank: int
    version: str
    entries: tuple[FlightEntry, ...] = ()
    """Oldest first, as the ring buffer held them."""
    pg_config: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Group name -> its global ranks (gloo in PyTorch 2.13 records none usable: its only
    ``pg_config`` item has an empty name, which is dropped)."""
    group_descs: Mapping[str, str] = field(default_factory=dict)
    """Group name -> the description PyTorch gave it (``default_pg``, ``mesh_tp`` ...)."""
    comm_lib_version: str = ""
    path: str = ""
    written: float | None = None
    """The file's modification time (unix seconds): about when the dump was taken."""

    @property
    def calls(self) -> tuple[CollectiveCall, ...]:
        return tuple(e.call for e in self.entries)

    def rank_state(self, recent: int = 16) -> RankState:
        """Where this rank stood in each process group when it dumped.

        1. Point-to-point records are left out of the groups: their ``p2p_seq_id`` counts the
           sends and receives of this rank only, so it does not line up across ranks.
        2. ``entered_seq`` is the highest ``collective_seq_id`` of the group.
        3. ``completed_seq`` is ``entered_seq`` when every entry completed; otherwise the higher
           of the newest completed entry and one below the oldest unfinished one. A group's
           collectives finish in order (NCCL runs them on one stream; a gloo collective needs
           every member, who all got past the earlier ones), so a completed entry vouches for
           the older ones, which covers a gloo ``async_op`` work that finished but was not
           retired yet; and when only unfinished entries were dumped (``onlyActive``) the ones
           before the oldest of them finished.
        """
        by_group: dict[str, list[FlightEntry]] = {}
        for e in self.entries:
            if not e.is_p2p:
                by_group.setdefault(e.call.group, []).append(e)
        groups: dict[str, GroupState] = {}
        for name, entries in by_group.items():
            entered = max(e.collective_seq for e in entries)
            pending = [e.collective_seq for e in entries if not e.completed]
            done = [e.collective_seq for e in entries if e.completed]
            completed = (max(max(done, default=0), min(pending) - 1) if pending else entered)
            last = [e for e in entries if e.collective_seq == entered][-1]
            groups[name] = GroupState(group=name, entered_seq=entered, completed_seq=completed,
                                      last=last.call)
        tail = self.calls[-recent:] if recent > 0 else ()
        return RankState(rank=self.rank, groups=groups, updated=self.written, source=SOURCE,
                         recent=tail)


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where} must be an integer, got {value!r:.60}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise TraceError(f"{where} must be a string, got {value!r:.60}")
    return value


def _opt_ns(value: object, where: str) -> float | None:
    """Nanoseconds -> unix seconds; the pickle writes None for 'not seen', the JSON writes 0."""
    if value is None:
        return None
    ns = _int(value, where)
    return ns / 1e9 if ns > 0 else None


def _group_name(name: str, desc: str) -> str:
    return WORLD if desc == DEFAULT_PG_DESC else name


def _sizes(value: object, where: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        raise TraceError(f"{where} must be a list of shapes")
    out = []
    for i, shape in enumerate(value):
        if not isinstance(shape, (list, tuple)):
            raise TraceError(f"{where}[{i}] must be a shape (a list of integers)")
        out.append(tuple(_int(d, f"{where}[{i}]") for d in shape))
    return tuple(out)


def _nbytes(sizes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]) -> int:
    """Bytes of the inputs; 0 when a dtype is unknown or the lists disagree (unknown, rather than
    an undercount)."""
    if len(sizes) != len(dtypes) or any(d not in _ITEMSIZE for d in dtypes):
        return 0
    return sum(math.prod(shape) * _ITEMSIZE[d] for shape, d in zip(sizes, dtypes, strict=True))


def _entry(raw: object, where: str, group_sizes: Mapping[str, int]) -> FlightEntry:
    if not isinstance(raw, Mapping):
        raise TraceError(f"{where} must be an object")
    pg = raw.get("process_group")
    if not (isinstance(pg, (list, tuple)) and len(pg) == 2
            and all(isinstance(x, str) for x in pg)):
        raise TraceError(f"{where}.process_group must be [name, desc]")
    name, desc = pg
    group = _group_name(name, desc)
    profiling_name = _str(raw.get("profiling_name"), f"{where}.profiling_name")
    state = _str(raw.get("state"), f"{where}.state")
    if state not in _STATES:
        raise TraceError(f"{where}.state must be one of {sorted(_STATES)}, got {state!r:.40}")
    is_p2p = raw.get("is_p2p", False)
    if not isinstance(is_p2p, bool):
        raise TraceError(f"{where}.is_p2p must be true or false")
    retired = raw.get("retired", False)
    if not isinstance(retired, bool):
        raise TraceError(f"{where}.retired must be true or false")
    collective_seq = _int(raw.get("collective_seq_id"), f"{where}.collective_seq_id")
    p2p_seq = _int(raw.get("p2p_seq_id", 0), f"{where}.p2p_seq_id")
    sizes = _sizes(raw.get("input_sizes", []), f"{where}.input_sizes")
    dtypes_raw = raw.get("input_dtypes", [])
    if not (isinstance(dtypes_raw, (list, tuple))
            and all(isinstance(d, str) for d in dtypes_raw)):
        raise TraceError(f"{where}.input_dtypes must be a list of strings")
    dtypes = tuple(dtypes_raw)
    timeout_ms = raw.get("timeout_ms")
    created = _opt_ns(_int(raw.get("time_created_ns"), f"{where}.time_created_ns"),
                      f"{where}.time_created_ns")
    started = _opt_ns(raw.get("time_discovered_started_ns"),
                      f"{where}.time_discovered_started_ns")
    ended = _opt_ns(raw.get("time_discovered_completed_ns"),
                    f"{where}.time_discovered_completed_ns")
    # Strip the backend ("nccl:") and, for p2p, the peers ("send 0->1").
    op = profiling_name.partition(":")[2] if ":" in profiling_name else profiling_name
    op = op.split(" ", 1)[0] or profiling_name
    if ended is None and _finished(state, retired, _backend(profiling_name)):
        # Gloo gives no completion time; without one the call would read as still running.
        ended = started if started is not None else created
    return FlightEntry(
        call=CollectiveCall(seq=p2p_seq if is_p2p else collective_seq, op=op, group=group,
                            group_size=group_sizes.get(group, 0), nbytes=_nbytes(sizes, dtypes),
                            entered=created, started=started, ended=ended),
        record_id=_int(raw.get("record_id"), f"{where}.record_id"),
        pg_id=_int(raw.get("pg_id"), f"{where}.pg_id"), group_desc=desc,
        profiling_name=profiling_name, state=state, retired=retired, is_p2p=is_p2p,
        collective_seq=collective_seq, p2p_seq=p2p_seq,
        op_id=_int(raw.get("op_id", 0), f"{where}.op_id"),
        timeout_s=None if timeout_ms is None else _int(timeout_ms, f"{where}.timeout_ms") / 1e3,
        input_sizes=sizes, input_dtypes=dtypes)


def _ranks(value: object, where: str) -> tuple[int, ...]:
    # PyTorch writes the ranks as a string, "[0, 1, 2]"; accept a list as well.
    if isinstance(value, str):
        if not re.fullmatch(r"\[\s*(\d+\s*(,\s*\d+\s*)*)?\]", value):
            raise TraceError(f"{where} must be a list of ranks like \"[0, 1]\", got {value!r:.60}")
        return tuple(int(x) for x in re.findall(r"\d+", value))
    if isinstance(value, (list, tuple)):
        return tuple(_int(x, where) for x in value)
    raise TraceError(f"{where} must be a list of ranks")


def _pg_config(value: object, where: str) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    if value is None:
        return {}, {}
    if not isinstance(value, Mapping):
        raise TraceError(f"{where} must be an object")
    ranks: dict[str, tuple[int, ...]] = {}
    descs: dict[str, str] = {}
    for key, info in value.items():
        at = f"{where}[{key!r}]"
        if not isinstance(info, Mapping):
            raise TraceError(f"{at} must be an object")
        name = _str(info.get("name", key), f"{at}.name")
        desc = _str(info.get("desc", ""), f"{at}.desc")
        if not name:
            continue  # gloo's placeholder (PyTorch 2.13): no name, ranks that vary by rank
        group = _group_name(name, desc)
        ranks[group] = _ranks(info.get("ranks"), f"{at}.ranks")
        descs[group] = desc
    return ranks, descs


def _check_version(value: object, path: str) -> str:
    if value is None:
        raise TraceError(f"{path}: no 'version': not a flight-recorder dump")
    version = str(value)
    m = _VERSION.match(version)
    if m is None or int(m.group(1)) != SUPPORTED_MAJOR:
        raise TraceError(f"{path}: flight-recorder dump version {version!r:.20} is not supported "
                         f"(trainguard reads {SUPPORTED_MAJOR}.x)")
    return version


def _rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def parse_dump(data: object, *, path: str = "<dump>", rank: int | None = None,
               written: float | None = None) -> FlightDump:
    """A `FlightDump` from an already-loaded dump object (the unpickled or JSON-decoded dict)."""
    if not isinstance(data, Mapping):
        raise TraceError(f"{path}: a flight-recorder dump is an object with 'version' and "
                         f"'entries', got {type(data).__name__}")
    version = _check_version(data.get("version"), path)
    if rank is None and "rank" in data:
        rank = _int(data["rank"], f"{path}: rank")
    if rank is None:
        raise TraceError(f"{path}: cannot tell the rank: the dump has none and the file name does "
                         "not end in it (name it <prefix><rank>, e.g. nccl_trace_rank_3)")
    if rank < 0:
        raise TraceError(f"{path}: rank must be >= 0, got {rank}")
    pg_ranks, descs = _pg_config(data.get("pg_config"), f"{path}: pg_config")
    raw_entries = data.get("entries", [])  # the JSON dump leaves the key out when empty
    if not isinstance(raw_entries, (list, tuple)):
        raise TraceError(f"{path}: entries must be a list")
    sizes = {g: len(r) for g, r in pg_ranks.items()}
    entries = tuple(_entry(e, f"{path}: entries[{i}]", sizes) for i, e in enumerate(raw_entries))
    for e in entries:
        descs.setdefault(e.call.group, e.group_desc)
    comm = data.get("comm_lib_version", "")
    return FlightDump(rank=rank, version=version, entries=entries, pg_config=pg_ranks,
                      group_descs=descs, comm_lib_version=comm if isinstance(comm, str) else "",
                      path=path, written=written)


def read_dump(path: str | os.PathLike[str], *, rank: int | None = None,
              max_bytes: int = MAX_DUMP_BYTES) -> FlightDump:
    """Read one rank's dump (pickle or JSON, told apart by content).

    The rank is ``rank`` when given, else the dump's own ``rank`` field, else the number that
    ends the file name (``nccl_trace_rank_3``, ``trace_3.json``). `TraceError` with one line
    naming the file when it is missing, not a regular file, over `max_bytes`, truncated, nested
    deeper than `MAX_DEPTH`, not a dump, of an unknown format version, or a pickle that asks for
    any class or function.
    """
    p = Path(path)
    try:
        raw = read_bounded(p, max_bytes)
        written = p.stat().st_mtime
    except UnreadableFile as exc:
        raise TraceError(f"{p}: cannot read flight-recorder dump ({exc.reason})") from exc
    except OSError as exc:
        raise TraceError(f"{p}: cannot read flight-recorder dump ({exc.strerror or exc})") from exc
    data = load_dump(raw, str(p))
    if rank is None and not (isinstance(data, Mapping) and "rank" in data):
        rank = _rank_from_name(p)
    return parse_dump(data, path=str(p), rank=rank, written=written)


def _dump_files(directory: Path, prefix: str | None) -> list[Path]:
    try:
        children = sorted(directory.iterdir())
    except OSError as exc:
        raise TraceError(f"{directory}: cannot list ({exc.strerror or exc})") from exc
    return [c for c in children
            if c.is_file() and not c.name.startswith(".")
            and (prefix is None or c.name.startswith(prefix))
            and _RANK_IN_NAME.search(c.name) is not None]


def read_dumps(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
               prefix: str | None = None) -> list[FlightDump]:
    """Read the per-rank dumps of one job, ordered by rank.

    ``source`` is a directory (its files named ``<prefix><rank>``, optionally ending in
    ``.json``/``.pkl``; only those starting with ``prefix`` when given) or a list of files.
    Two dumps of the same rank are an error (two jobs' dumps in one directory, or a pickle and
    a JSON dump of the same moment side by side).
    """
    if isinstance(source, (str, os.PathLike)):
        root = Path(source)
        if root.is_dir():
            paths = _dump_files(root, prefix)
            if not paths:
                want = f"{prefix}<rank>" if prefix else "<prefix><rank>"
                raise TraceError(f"{root}: no flight-recorder dumps (files named {want})")
        elif root.exists():
            paths = [root]
        else:
            raise TraceError(f"{root}: no such file or directory")
    else:
        paths = [Path(p) for p in source]
        if not paths:
            raise TraceError("no flight-recorder dumps given")
    dumps: dict[int, FlightDump] = {}
    for p in paths:
        dump = read_dump(p)
        if dump.rank in dumps:
            raise TraceError(f"rank {dump.rank} has two dumps: {dumps[dump.rank].path} and "
                             f"{dump.path}")
        dumps[dump.rank] = dump
    return [dumps[r] for r in sorted(dumps)]


__all__ = [
    "ALLOWED_GLOBALS",
    "DEFAULT_PREFIX",
    "MAX_DEPTH",
    "MAX_DUMP_BYTES",
    "SOURCE",
    "SUPPORTED_MAJOR",
    "FlightDump",
    "FlightEntry",
    "parse_dump",
    "read_dump",
    "read_dumps",
]
