"""The memory-mapped collective state file: what the writer puts in, the reader gets back, also
while another process writes and when the writer stopped mid-update."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from trainguard.errors import TraceError
from trainguard.trace.statefile import MAX_GROUPS, SIZE, StateWriter, read_state


def test_enter_and_complete_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "rank3.trace"
    w = StateWriter(path, rank=3)
    world = w.group("world", 4)
    tp = w.group("tp", 2)
    assert (world, tp, w.group("world", 4)) == (0, 1, 0)
    w.enter(world, 1, "all_reduce", 4096, 100.0)
    w.complete(world, 1, 100.5)
    w.enter(world, 2, "all_gather", 8192, 101.0)
    w.enter(tp, 1, "broadcast", 16, 101.2)
    w.step(17, 101.3)
    w.span("backward", 101.4)
    read = read_state(path)
    assert not read.torn and read.span_started == 101.4
    st = read.state
    assert (st.rank, st.step, st.span, st.source) == (3, 17, "backward", "trainguard")
    g = st.groups["world"]
    assert (g.entered_seq, g.completed_seq, g.inside) == (2, 1, True)
    assert g.last is not None and (g.last.op, g.last.nbytes, g.last.entered, g.last.ended) == (
        "all_gather", 8192, 101.0, None)
    assert st.groups["tp"].last is not None and st.groups["tp"].last.group_size == 2
    w.complete(world, 2, 102.0)
    w.span(None, 102.1)
    st = read_state(path).state
    assert not st.groups["world"].inside and st.groups["world"].last.ended == 102.0  # type: ignore[union-attr]
    assert st.span is None
    w.close()


def test_a_late_completion_of_an_older_call_does_not_mark_the_newer_one_done(
    tmp_path: Path
) -> None:
    w = StateWriter(tmp_path / "r.trace", rank=0)
    slot = w.group("world", 2)
    w.enter(slot, 1, "all_reduce", 8, 1.0)  # async: completes later
    w.enter(slot, 2, "barrier", 0, 2.0)
    w.complete(slot, 1, 3.0)
    g = read_state(tmp_path / "r.trace").state.groups["world"]
    assert (g.entered_seq, g.completed_seq, g.inside) == (2, 1, True)
    assert g.last is not None and g.last.ended is None


def test_groups_beyond_the_limit_are_ignored_not_fatal(tmp_path: Path) -> None:
    w = StateWriter(tmp_path / "r.trace", rank=0)
    slots = [w.group(f"g{i}", 2) for i in range(MAX_GROUPS + 2)]
    assert slots[-1] == -1
    w.enter(-1, 1, "all_reduce", 1, 1.0)  # a no-op
    assert len(read_state(tmp_path / "r.trace").state.groups) == MAX_GROUPS


def test_a_writer_stopped_mid_update_reads_as_torn(tmp_path: Path) -> None:
    path = tmp_path / "r.trace"
    w = StateWriter(path, rank=1)
    w.enter(w.group("world", 2), 5, "all_gather", 1, 1.0)
    with path.open("r+b") as f:  # the seqlock word left odd, as a SIGSTOP mid-write does
        f.seek(12)
        f.write(struct.pack("<I", 7))
    read = read_state(path)
    assert read.torn and read.state.groups["world"].entered_seq == 5


@pytest.mark.parametrize(("content", "match"), [
    (b"", "truncated"),
    (b"x" * 100, "truncated"),
    (b"NOTTRACE" + bytes(SIZE - 8), "not a trainguard trace state file"),
    (b"TGTRACE1" + struct.pack("<I", 99) + bytes(SIZE - 12), "version 99"),
])
def test_bad_files_are_one_clear_error(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.trace"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=match):
        read_state(path)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        read_state(tmp_path / "nope.trace")


def test_nan_times_mean_unknown(tmp_path: Path) -> None:
    w = StateWriter(tmp_path / "r.trace", rank=0)
    w.group("world", 2)
    g = read_state(tmp_path / "r.trace").state.groups["world"]
    assert g.last is None and g.entered_seq == 0 and not g.inside
