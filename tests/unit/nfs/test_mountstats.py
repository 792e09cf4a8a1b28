"""The mountstats parser on the published captures in tests/data/mountstats (see its README) and
on broken input: each problem is one `TelemetryError` naming the file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nfs_builder import Mount, render

from trainguard.errors import TelemetryError, TrainguardError
from trainguard.nfs import MountstatsSnapshot, NfsMount, parse_mountstats

DATA = Path(__file__).resolve().parents[2] / "data" / "mountstats"


def load(name: str) -> MountstatsSnapshot:
    return parse_mountstats((DATA / name).read_text(), name)


def mount(name: str, mountpoint: str) -> NfsMount:
    [m] = [m for m in load(name).mounts if m.mountpoint == mountpoint]
    return m


# file -> non-NFS mounts, then per NFS mount: (mount point, vers, proto, nconnect, wsize, rsize,
# xprt lines, per-op lines, errors column present, "RPC iostats version")
CAPTURES = {
    "blog-nfs3-tcp-localhost.mountstats": (0, [
        ("/mnt", "3", "tcp", 1, 1048576, 1048576, 1, 22, True, "1.1")]),
    "pcp-nfs3-nfs4-isilon.mountstats": (12, [
        ("/ifs", "3", "tcp", 1, 32768, 32768, 1, 22, False, "1.0"),
        ("/mnt/nfsv4", "4.0", "tcp", 1, 1048576, 1048576, 1, 47, False, "1.0"),
        ("/ifsfoo", "3", "tcp", 1, 32768, 32768, 1, 22, False, "1.0"),
        ("/mnt/nfs41", "4.1", "tcp", 1, 1048576, 1048576, 1, 53, False, "1.0")]),
    "pcp-nfs3-rdma-nconnect8.mountstats": (1, [
        (mp, "3", "rdma", 8, 65536, 65536, 8, 22, True, "1.1")
        for mp in ("/storage/group", "/storage/home", "/storage/work", "/storage/pcp-data")]),
    "pcp-nfs3-tcp-nas-retrans.mountstats": (4, [
        ("/nasbox/music", "3", "tcp", 1, 32768, 32768, 1, 22, False, "1.0"),
        ("/nasbox/newmovies", "3", "tcp", 1, 32768, 32768, 1, 22, False, "1.0")]),
    "pcp-nfs42-krb5p.mountstats": (33, [
        ("/home", "4.2", "tcp", 1, 131072, 131072, 1, 60, False, "1.0")]),
    "pcp-nfs42-single-stream.mountstats": (40, [
        ("/nfs-mount", "4.2", "tcp", 1, 1048576, 1048576, 1, 69, True, "1.1"),
        ("/nfs-mount-2", "4.2", "tcp", 1, 1048576, 1048576, 1, 69, True, "1.1")]),
    "procfs-fixture-nfs40-tcp.mountstats": (4, [
        ("/mnt/nfs/test", "4.0", "tcp", 1, 1048576, 1048576, 1, 4, False, "1.0")]),
    "procfs-nfs3-rdma-nconnect16.mountstats": (0, [
        ("<mountpoint>", "3", "rdma", 16, 1048576, 1048576, 16, 22, True, "1.1")]),
    "procfs-nfs41-tcp.mountstats": (0, [
        ("/var/lib/kubelet/pods/1c2215a7-0d92-4df5-83ce-a807bcc2f8c8/volumes/kubernetes.io~nfs/"
         "home-automation--node-red-data--pv0001", "4.1", "tcp", 1, 131072, 131072, 1, 63, True,
         "1.1")]),
}


def test_every_capture_is_in_the_table() -> None:
    assert sorted(p.name for p in DATA.glob("*.mountstats")) == sorted(CAPTURES)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_mounts(name: str) -> None:
    non_nfs, expected = CAPTURES[name]
    snap = load(name)
    assert snap.non_nfs == non_nfs
    assert snap.notes == ()
    got = [(m.mountpoint, m.nfs_version, m.proto, m.nconnect, m.size_option("wsize"),
            m.size_option("rsize"), len(m.xprts), len(m.ops), m.ops[0].errors is not None,
            m.rpc_iostats_version) for m in snap.mounts]
    assert got == expected
    for m in snap.mounts:
        assert m.statvers == "1.1"
        assert m.ops[0].name == "NULL"
        assert len(m.bytes) == 8
        assert {x.proto for x in m.xprts} == {m.proto}


def test_nfsv3_tcp_op_and_xprt_fields() -> None:
    m = mount("pcp-nfs3-nfs4-isilon.mountstats", "/ifs")
    assert m.device == "ifs-nas.test.edu:/ifs"
    assert m.age_s == 12515493
    write = m.op("WRITE")
    assert write is not None
    # WRITE: 9523 9523 0 175240916 1523680 3423263 57150 3480542 (no errors column: RPC 1.0)
    assert (write.ops, write.trans, write.timeouts, write.bytes_sent, write.bytes_recv,
            write.queue_ms, write.rtt_ms, write.execute_ms, write.errors) == (
        9523, 9523, 0, 175240916, 1523680, 3423263, 57150, 3480542, None)
    # xprt: tcp 789 1 193 0 0 71411 71411 0 180054 0 73 6675888 108644
    [x] = m.xprts
    assert (x.proto, x.srcport, x.bind_count, x.connect_count, x.connect_time, x.idle_time_s,
            x.sends, x.recvs, x.bad_xids, x.req_u, x.bklog_u, x.max_slots, x.sending_u,
            x.pending_u) == ("tcp", 789, 1, 193, 0, 0, 71411, 71411, 0, 180054, 0, 73, 6675888,
                             108644)


def test_nfsv4_minorversion_option_and_annotated_age() -> None:
    # The PCP file writes "vers=4,...,minorversion=0" and "age: 19  (time, in seconds, ...)".
    m = mount("pcp-nfs3-nfs4-isilon.mountstats", "/mnt/nfsv4")
    assert (m.fstype, m.nfs_version, m.option("minorversion"), m.age_s) == ("nfs4", "4.0", "0",
                                                                              19)


def test_nfsv42_errors_column_and_retransmissions() -> None:
    m = mount("pcp-nfs42-single-stream.mountstats", "/nfs-mount")
    commit = m.op("COMMIT")
    assert commit is not None
    assert (commit.ops, commit.rtt_ms, commit.execute_ms, commit.errors) == (12, 180398, 180398,
                                                                             0)
    lookup = m.op("LOOKUP")
    assert lookup is not None and lookup.errors == 4
    getattr_ = mount("pcp-nfs3-tcp-nas-retrans.mountstats", "/nasbox/music").op("GETATTR")
    assert getattr_ is not None
    assert (getattr_.ops, getattr_.trans, getattr_.timeouts) == (4125, 4322, 1)


def test_rdma_nconnect_lines_are_one_xprt_each() -> None:
    m = mount("procfs-nfs3-rdma-nconnect16.mountstats", "<mountpoint>")
    assert m.option("nconnect") == "16" and len(m.xprts) == 16
    first = m.xprts[0]
    # xprt: rdma 0 0 5808 62 0 494490723 494490687 36 10032963746 1282789 107150285 ...
    assert (first.srcport, first.connect_count, first.connect_time, first.sends, first.recvs,
            first.bad_xids, first.req_u, first.bklog_u) == (0, 5808, 62, 494490723, 494490687,
                                                            36, 10032963746, 1282789)
    assert first.max_slots is None  # RDMA prints no max_slots / sending_u / pending_u
    assert len(first.extra) == 17 and first.extra[:3] == (107150285, 1226637531, 2673889)
    assert [x.line for x in m.xprts] == list(range(9, 25))
    assert len(mount("pcp-nfs3-rdma-nconnect8.mountstats", "/storage/group").xprts) == 8


def test_unsigned_negative_time_sum_is_kept_raw() -> None:
    # ACCESS's queue sum is a negative interval printed unsigned (2**64 - x).
    access = mount("procfs-fixture-nfs40-tcp.mountstats", "/mnt/nfs/test").op("ACCESS")
    assert access is not None and access.queue_ms == 18446743919241604546


def test_session_version_and_sec_options() -> None:
    m = mount("pcp-nfs42-krb5p.mountstats", "/home")
    assert (m.option("sec"), m.option("hard"), m.option("missing")) == ("krb5p", "", None)


# --- bad input: one error naming the file and line ---------------------------------------------

BLOG = (DATA / "blog-nfs3-tcp-localhost.mountstats").read_text()
KRB5P = (DATA / "pcp-nfs42-krb5p.mountstats").read_text()


def _cut_at(text: str, needle: str, keep: int) -> str:
    """`text` cut `keep` characters into the line containing `needle` (no newline after)."""
    start = text.index(needle)
    return text[:start + keep]


def _lines(text: str, n: int) -> str:
    return "".join(text.splitlines(keepends=True)[:n])


def _line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), start=1) if needle in ln)


BAD = [
    # (case, text, line in the message, words in the message)
    ("cut inside a per-op line", _cut_at(BLOG, "WRITE:", 14), _line_of(BLOG, "WRITE:"),
     "counters, expected 8 or 9"),
    ("cut at a line end in an NFSv3 per-op section", _lines(BLOG, 17),
     _line_of(BLOG, "READ:"), "stop after READ at the end of the file"),
    ("cut inside an op name", _cut_at(BLOG, "WRITE:", 3), _line_of(BLOG, "WRITE:"),
     "is not a per-op line"),
    ("cut so a line loses its errors column",
     _cut_at(BLOG, "FSINFO:", len("FSINFO: 2 2 0 208 160 0 0 0")), _line_of(BLOG, "FSINFO:"),
     "has 8 counters where the lines above have 9"),
    ("cut inside an xprt line", _cut_at(BLOG, "xprt:", 20), _line_of(BLOG, "xprt:"),
     "fields, expected 13 for statvers=1.1"),
    ("cut before the xprt and per-op lines", _cut_at(BLOG, "RPC iostats", 10), 1,
     "has neither 'xprt:' lines nor a 'per-op statistics' section"),
    ("cut inside the device line", KRB5P[:KRB5P.index("nfs.f24.local:/home mounted") + 30],
     _line_of(KRB5P, "nfs.f24.local:/home mounted"), "malformed 'device"),
    ("NFSv4.3", BLOG.replace("vers=3,", "vers=4.3,"), 2, "unknown NFS version vers=4.3"),
    ("NFS version 5", BLOG.replace("vers=3,", "vers=5,"), 2, "unknown NFS version vers=5"),
    ("no vers= option", BLOG.replace("vers=3,", ""), 2, "unknown NFS version: its opts: line "
                                                        "has no vers="),
    ("no opts line", "\n".join(ln for ln in BLOG.splitlines() if "opts:" not in ln) + "\n", 1,
     "has no 'opts:' line"),
    ("unknown transport", BLOG.replace("xprt:   tcp", "xprt:   sctp"), 9,
     "unknown transport 'sctp'"),
    ("a word where a counter belongs", BLOG.replace("WRITE: 1 1 0", "WRITE: 1 x 0"),
     _line_of(BLOG, "WRITE:"),
     "'x' is not a counter"),
    ("empty file", "", 1, "the file is empty"),
    ("blank file", "\n\n  \n", 1, "the file is empty"),
    ("not mountstats", "Inter-|   Receive\n face |bytes packets\n  eth0: 1 2 3\n", 1,
     "no 'device ... mounted on ...' line"),
    ("/proc/mounts instead", "filer:/ckpt /mnt/ckpt nfs rw,vers=3 0 0\n", 1,
     "no 'device ... mounted on ...' line"),
    ("binary garbage", "\x00\x01\ufffd\ufffdELF\x02\x01", 1, "no 'device ... mounted on"),
    ("bad statvers", BLOG.replace("statvers=1.1", "statvers=x"), 1, "unknown statvers='x'"),
]


@pytest.mark.parametrize(("case", "text", "line", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_error(case: str, text: str, line: int, words: str) -> None:
    with pytest.raises(TelemetryError) as info:
        parse_mountstats(text, "capture.txt")
    message = str(info.value)
    assert message.startswith(f"capture.txt:{line}: "), message
    assert words in message, message
    assert "\n" not in message
    assert isinstance(info.value, TrainguardError)


@pytest.mark.parametrize("vers", ["4.3", "5", "1"])
def test_unknown_version_names_the_mount(vers: str) -> None:
    text = render(Mount(vers="4.1")).replace("vers=4.1,", f"vers={vers},")
    with pytest.raises(TelemetryError, match=re.escape(
            f"NFS mount /mnt/ckpt (filer:/ckpt): unknown NFS version vers={vers}")):
        parse_mountstats(text, "x")


def test_tcp_xprt_of_ten_fields_is_statvers_1_0_only() -> None:
    ten = BLOG.replace("tcp 795 1 2 0 2 15 15 0 15 0 2 0 0", "tcp 795 1 2 0 2 15 15 0 15 0")
    with pytest.raises(TelemetryError, match=r"x:9: .*10 fields, expected 13 for statvers=1\.1"):
        parse_mountstats(ten, "x")
    [m] = parse_mountstats(ten.replace("statvers=1.1", "statvers=1.0"), "x").mounts
    assert m.xprts[0].max_slots is None and m.xprts[0].bklog_u == 0


def test_trimmed_block_followed_by_another_mount_is_accepted() -> None:
    # Only the last block can have been cut off; a short list before another mount was trimmed.
    trimmed = _lines(BLOG, 17) + "device tmpfs mounted on /tmp with fstype tmpfs\n"
    [m] = parse_mountstats(trimmed, "x").mounts
    assert [op.name for op in m.ops][-1] == "READ"


def test_nfsv4_list_may_end_anywhere() -> None:
    # NFSv4's operation list grows with the kernel (and procfs trims it): no completeness check.
    [m] = load("procfs-fixture-nfs40-tcp.mountstats").mounts
    assert [op.name for op in m.ops] == ["NULL", "READ", "WRITE", "ACCESS"]


def test_missing_final_newline_is_a_note() -> None:
    snap = parse_mountstats(BLOG.rstrip("\n"), "x")
    [note] = snap.notes
    assert "ends without a newline" in note and "line 32" in note


def test_no_device_lines_and_statless_nfs_are_skipped() -> None:
    text = ("no device mounted on /run/x with fstype tmpfs\n"
            "device filer:/old mounted on /old with fstype nfs\n" + BLOG)
    snap = parse_mountstats(text, "x")
    assert [m.mountpoint for m in snap.mounts] == ["/mnt"]
    assert snap.non_nfs == 2
    assert snap.notes == ("/old: NFS mount without statistics (no statvers=), skipped",)


def test_only_local_mounts_is_an_empty_snapshot() -> None:
    snap = parse_mountstats("device proc mounted on /proc with fstype proc\n", "x")
    assert (snap.mounts, snap.non_nfs) == ((), 1)


def test_builder_output_round_trips() -> None:
    [m] = parse_mountstats(render(Mount(vers="4.2", nconnect=4, wsize=65536)), "x").mounts
    assert (m.nfs_version, m.nconnect, m.size_option("wsize"), len(m.xprts)) == ("4.2", 4,
                                                                                65536, 4)
    assert m.ops[-1].name == "READ_PLUS"
