"""A capture pasted without its per-op statistics (it stops after the ``xprt:`` lines) is
diagnosed from the transport counters, with the per-op figures reported missing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trainguard.errors import TelemetryError
from trainguard.nfs import (
    Attribution,
    Thresholds,
    cumulative,
    diagnose,
    diff,
    parse_mountstats,
    summarize_transport,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "mountstats"
CAPTURES = sorted(p.name for p in DATA.glob("*.mountstats"))


def without_per_op(text: str) -> str:
    """`text` with every per-op section cut out (each block then ends after its xprt: lines)."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("per-op statistics"):
            skipping = True
        elif line.lstrip().startswith(("device ", "no device ")):
            skipping = False
        if not skipping:
            kept.append(line)
    return "".join(kept)


@pytest.mark.parametrize("name", CAPTURES)
def test_every_real_capture_without_per_op_is_judged_from_the_transport(name: str) -> None:
    full = parse_mountstats((DATA / name).read_text(), name)
    partial = parse_mountstats(without_per_op((DATA / name).read_text()), name)
    assert [m.mountpoint for m in partial.mounts] == [m.mountpoint for m in full.mounts]
    t = Thresholds()
    for whole, cut in zip(full.mounts, partial.mounts, strict=True):
        assert not cut.per_op and cut.ops == ()
        assert [replace(x, line=0) for x in cut.xprts] == [replace(x, line=0)
                                                           for x in whole.xprts]
        d = diagnose(cumulative(cut))
        assert d.notes[0].startswith("the capture has no per-op statistics (a partial paste?)")
        assert not d.per_op and d.ops == () and d.to_dict()["per_op_missing"] is True
        tr = summarize_transport(whole.xprts)
        # The verdict follows the transport figures, whatever the full capture's per-op said.
        if tr is None or tr.sends == 0:
            expected = (Attribution.IDLE, "no-traffic")
        elif tr.backlog is not None and tr.backlog >= t.backlog_min:
            expected = (Attribution.CLIENT_QUEUE, "rpc-slots")
        elif tr.sending is not None and tr.sending >= t.sending_min:
            expected = (Attribution.CLIENT_QUEUE, "transmit-queue")
        else:
            expected = (Attribution.UNDETERMINED, "transport-only")
        assert (d.attribution, d.mechanism) == expected, (name, cut.mountpoint)
        assert d.attribution is not Attribution.HEALTHY
        if d.attribution is not Attribution.IDLE:
            assert "no per-op statistics" in d.summary or "without per-op" in d.summary
            assert d.recommendations[-1].action.startswith("Capture the mount's whole")


def test_truncated_real_capture_keeps_the_slot_saturation_numbers() -> None:
    # /storage/group of the nconnect=8 RDMA capture: ~48.9 requests wait for a credit per send.
    text = (DATA / "pcp-nfs3-rdma-nconnect8.mountstats").read_text()
    snap = parse_mountstats(without_per_op(text), "paste.txt")
    [group] = [m for m in snap.mounts if m.mountpoint == "/storage/group"]
    d = diagnose(cumulative(group))
    evidence = dict(d.findings[0].evidence)
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "rpc-slots")
    assert evidence["backlog_per_send"] == pytest.approx(48.91, abs=0.01)
    assert (evidence["connections"], evidence["per_op"]) == (8, "missing")
    commands = " ".join(r.command or "" for r in d.recommendations)
    assert "nconnect=16" in commands and "sunrpc.rdma_slot_table_entries=256" in commands
    assert "trainguard nfs diagnose --mount /storage/group" in commands


def test_paste_cut_right_after_the_xprt_line_at_the_end_of_the_file() -> None:
    text = (DATA / "blog-nfs3-tcp-localhost.mountstats").read_text()
    cut = text[:text.index("per-op statistics")].rstrip(" ")
    [m] = parse_mountstats(cut, "paste.txt").mounts
    assert not m.per_op and len(m.xprts) == 1
    d = diagnose(cumulative(m))
    assert (d.attribution, d.mechanism) == (Attribution.UNDETERMINED, "transport-only")
    # the empty per-op header alone (cut just after it) is the same partial paste
    header_only = text[:text.index("NULL:")].rstrip(" ")
    [m2] = parse_mountstats(header_only, "paste.txt").mounts
    assert not m2.per_op and m2.xprts == m.xprts


def test_nfsv41_partial_says_session_slots_are_invisible() -> None:
    text = (DATA / "procfs-nfs41-tcp.mountstats").read_text()
    snap = parse_mountstats(without_per_op(text), "x")
    d = diagnose(cumulative(snap.mounts[0]))
    if d.attribution is Attribution.UNDETERMINED:
        assert "session-slot waits do not show" in d.summary


def test_no_xprt_and_no_per_op_is_still_refused() -> None:
    text = (DATA / "blog-nfs3-tcp-localhost.mountstats").read_text()
    cut = text[:text.index("RPC iostats")]
    with pytest.raises(TelemetryError, match=r"has neither 'xprt:' lines nor a 'per-op"):
        parse_mountstats(cut, "x")


def test_diff_with_a_partial_sample_has_no_per_op_window() -> None:
    text = (DATA / "pcp-nfs3-rdma-nconnect8.mountstats").read_text()
    full, partial = parse_mountstats(text, "a"), parse_mountstats(without_per_op(text), "b")
    for before, after in ((full, partial), (partial, full)):
        for w in diff(before, after, interval_s=10.0).windows:
            assert not w.per_op and w.ops == ()
            d = diagnose(w)
            assert d.attribution is Attribution.IDLE  # same counters twice: nothing was sent
