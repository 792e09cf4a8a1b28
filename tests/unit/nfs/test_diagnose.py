"""Attribution on the published captures (expectations and reasons in
tests/data/mountstats/README.md) and on constructed before/after pairs, one per mechanism."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from nfs_builder import Conn, Mount, Op, render

import trainguard.nfs
from trainguard.errors import ConfigError, TelemetryError
from trainguard.nfs import (
    Attribution,
    Basis,
    Environment,
    MountDiagnosis,
    Thresholds,
    cumulative,
    diagnose,
    diff,
    parse_mountstats,
    shared_transports,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "mountstats"
SLOTS_128 = Environment(slot_limit=128, slot_limit_source="--slot-limit")

# --- real captures (since mount) -----------------------------------------------------------------

REAL = {
    ("blog-nfs3-tcp-localhost.mountstats", "/mnt"): ("idle", "no-data-traffic"),
    ("pcp-nfs3-nfs4-isilon.mountstats", "/ifs"): ("client-queue", "transmit-queue"),
    ("pcp-nfs3-nfs4-isilon.mountstats", "/mnt/nfsv4"): ("underutilized", "low-concurrency"),
    ("pcp-nfs3-nfs4-isilon.mountstats", "/ifsfoo"): ("client-queue", "transmit-queue"),
    ("pcp-nfs3-nfs4-isilon.mountstats", "/mnt/nfs41"): ("idle", "no-data-traffic"),
    ("pcp-nfs3-rdma-nconnect8.mountstats", "/storage/group"): ("client-queue", "rpc-slots"),
    ("pcp-nfs3-rdma-nconnect8.mountstats", "/storage/home"): ("healthy", "ok"),
    ("pcp-nfs3-rdma-nconnect8.mountstats", "/storage/work"): ("client-queue", "rpc-slots"),
    ("pcp-nfs3-rdma-nconnect8.mountstats", "/storage/pcp-data"): ("healthy", "ok"),
    ("pcp-nfs3-tcp-nas-retrans.mountstats", "/nasbox/music"): ("network", "retransmissions"),
    ("pcp-nfs3-tcp-nas-retrans.mountstats", "/nasbox/newmovies"): ("idle", "no-data-traffic"),
    ("pcp-nfs42-krb5p.mountstats", "/home"): ("client-queue", "session-slots"),
    ("pcp-nfs42-single-stream.mountstats", "/nfs-mount"): ("client-queue", "transmit-queue"),
    ("pcp-nfs42-single-stream.mountstats", "/nfs-mount-2"): ("client-queue", "transmit-queue"),
    ("procfs-fixture-nfs40-tcp.mountstats", "/mnt/nfs/test"): ("server", "data-rtt"),
    ("procfs-nfs3-rdma-nconnect16.mountstats", "<mountpoint>"): ("server", "data-rtt"),
    ("procfs-nfs41-tcp.mountstats", "/var/lib/kubelet/pods/1c2215a7-0d92-4df5-83ce-a807bcc2f8c8/"
     "volumes/kubernetes.io~nfs/home-automation--node-red-data--pv0001"):
        ("client-queue", "session-slots"),
}


def real(name: str, mountpoint: str) -> MountDiagnosis:
    snap = parse_mountstats((DATA / name).read_text(), name)
    [window] = [w for w in shared_transports([cumulative(m) for m in snap.mounts])
                if w.mount.mountpoint == mountpoint]
    return diagnose(window)


def test_every_real_mount_has_an_expectation() -> None:
    seen = set()
    for path in DATA.glob("*.mountstats"):
        for m in parse_mountstats(path.read_text(), path.name).mounts:
            seen.add((path.name, m.mountpoint))
    assert seen == set(REAL)


def test_readme_lists_every_expectation() -> None:
    readme = (DATA / "README.md").read_text()
    for (name, mountpoint), (category, mechanism) in REAL.items():
        assert name in readme
        assert f"{category} / {mechanism}" in readme, (name, mountpoint)


@pytest.mark.parametrize(("name", "mountpoint"), sorted(REAL), ids=lambda x: str(x)[-40:])
def test_real_capture_attribution(name: str, mountpoint: str) -> None:
    d = real(name, mountpoint)
    assert (str(d.attribution), d.mechanism) == REAL[(name, mountpoint)]
    assert d.basis is Basis.SINCE_MOUNT
    json.dumps(d.to_dict())  # the JSON form is plain data


def test_real_slot_saturation_numbers() -> None:
    # /storage/group: WRITE 1195907908 ms queue over 3304938 calls; 8 RDMA connections, each
    # with ~48.9 requests waiting for a credit at every send.
    d = real("pcp-nfs3-rdma-nconnect8.mountstats", "/storage/group")
    evidence = dict(d.findings[0].evidence)
    assert evidence["op"] == "WRITE"
    assert evidence["queue_ms"] == pytest.approx(1195907908 / 3304938)
    assert evidence["queue_share"] == pytest.approx(1195907908 / 1246575394)
    assert evidence["backlog_per_send"] == pytest.approx(48.91, abs=0.01)
    assert evidence["connections"] == 8
    commands = " ".join(r.command or "" for r in d.recommendations)
    assert "nconnect=16" in commands and "sunrpc.rdma_slot_table_entries=256" in commands


def test_real_transmit_queue_numbers() -> None:
    d = real("pcp-nfs3-nfs4-isilon.mountstats", "/ifs")
    evidence = dict(d.findings[0].evidence)
    assert evidence["sending_per_send"] == pytest.approx(6675888 / 71411)
    assert evidence["backlog_per_send"] == 0
    assert d.recommendations[0].command is not None
    assert "nconnect=8" in d.recommendations[0].command
    assert "wsize=1048576" in d.recommendations[0].command  # 32 KiB writes today


def test_real_retransmissions_are_metadata_only_here() -> None:
    d = real("pcp-nfs3-tcp-nas-retrans.mountstats", "/nasbox/music")
    evidence = dict(d.findings[0].evidence)
    assert (evidence["retrans"], evidence["major_timeouts"], evidence["scope"]) == (206, 1, "all")
    assert any("shared with /nasbox/newmovies" in n for n in d.notes)


def test_real_krb5p_session_slots_notes_the_encryption() -> None:
    d = real("pcp-nfs42-krb5p.mountstats", "/home")
    assert any("sec=krb5p" in n for n in d.notes)
    assert d.recommendations[0].action == "Raise the server's NFSv4.1 session slot count"


# --- constructed before/after pairs --------------------------------------------------------------

WINDOW_S = 10


def pair(before: Mount, after: Mount, env: Environment | None = None,
         interval: float | None = WINDOW_S, thresholds: Thresholds | None = None
         ) -> MountDiagnosis:
    ws = diff(parse_mountstats(render(before), "a"), parse_mountstats(render(after), "b"),
              interval_s=interval)
    [w] = ws.windows
    return diagnose(w, env, thresholds)


def saturated(before: Mount, wsize_kib: int = 1024) -> Mount:
    """The operational report: 128 slots full, 93% of WRITE latency queueing."""
    return before.after(WINDOW_S, ops={"WRITE": Op.avg(20000, queue=80, rtt=6, kib=wsize_kib),
                                       "GETATTR": Op.avg(200, rtt=0.4)},
                        conns=[Conn.avg(20200, inflight=12, backlog=44, sending=60,
                                        max_slots=128)])


def commands(d: MountDiagnosis) -> str:
    return " | ".join(f"{r.action} :: {r.command}" for r in d.recommendations)


def test_a_saturated_rpc_slots() -> None:
    before = Mount()
    d = pair(before, saturated(before), Environment(slot_limit=128, slot_limit_source="flag",
                                                    link_gbps=200))
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "rpc-slots")
    evidence = dict(d.findings[0].evidence)
    assert evidence["queue_share"] == pytest.approx(80 / 86)
    assert evidence["backlog_per_send"] == pytest.approx(44)
    assert (evidence["slot_limit"], evidence["connections_at_limit"]) == (128, 1)
    assert d.basis is Basis.INTERVAL and d.duration_s == WINDOW_S
    # 20000 x 1 MiB in 10 s is 8.4% of 200 Gbit/s: the link is far from full.
    assert d.link_util == pytest.approx(20000 * 1048576 * 8 / WINDOW_S / 200e9, rel=1e-3)
    assert d.concurrency == pytest.approx(20000 * 86 / (WINDOW_S * 1000), rel=1e-3)
    [first, second] = d.recommendations
    assert first.command == ("umount /mnt/ckpt && mount -t nfs -o vers=3,nconnect=8 filer:/ckpt "
                             "/mnt/ckpt")
    assert second.command == "sysctl -w sunrpc.tcp_max_slot_table_entries=256"


def test_a_without_slot_limit_still_judged_from_the_backlog() -> None:
    before = Mount()
    d = pair(before, saturated(before))
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "rpc-slots")
    assert "tcp_max_slot_table_entries" in commands(d)
    assert any("slot limit unknown" in n for n in d.notes)


def test_b_nconnect_8_low_queue_is_healthy() -> None:
    before = Mount(nconnect=8)
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(20000, queue=0.3, rtt=6, kib=1024),
                                        "GETATTR": Op.avg(200, rtt=0.4)},
                         conns=[Conn.avg(2525, inflight=1.6, max_slots=20)] * 8)
    d = pair(before, after, SLOTS_128)
    assert (d.attribution, d.mechanism) == (Attribution.HEALTHY, "ok")
    assert d.concurrency == pytest.approx(20000 * 6.3 / (WINDOW_S * 1000), rel=1e-3)
    assert d.transport is not None and d.transport.connections == 8
    assert d.recommendations == ()


def test_c_server_bound() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(3000, queue=0.2, rtt=45, kib=1024),
                                        "GETATTR": Op.avg(500, rtt=0.4)})
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.SERVER, "data-rtt")
    evidence = dict(d.findings[0].evidence)
    assert evidence["rtt_ms"] == pytest.approx(45) and evidence["light_rtt_ms"] == 0.4
    assert d.recommendations[0].action == "Look at the server side"


def test_d_network_retransmissions_and_timeouts() -> None:
    before = Mount()
    # Retransmitted RPCs wait a full timeout before resending: that shows up as queue time.
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(5000, queue=300, rtt=5, kib=256,
                                                        retrans=400, timeouts=20),
                                        "GETATTR": Op.avg(200, rtt=0.4)})
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.NETWORK, "retransmissions")
    evidence = dict(d.findings[0].evidence)
    assert (evidence["retrans"], evidence["major_timeouts"], evidence["scope"]) == (400, 20,
                                                                                    "data")
    assert evidence["retrans_fraction"] == pytest.approx(400 / 5000)
    assert d.recommendations[0].action == "Find where RPCs are lost"
    # The inflated queue time is listed, not the attribution.
    assert Attribution.CLIENT_QUEUE in [f.category for f in d.findings[1:]]


def test_metadata_retransmissions_do_not_hide_slot_saturation() -> None:
    before = Mount()
    after = saturated(before)
    # 300 lost GETATTRs: 1.5% of all RPCs, none of them data.
    after = after.after(0, ops={"GETATTR": Op.avg(100, rtt=0.4, retrans=300)},
                        conns=[Conn.avg(400, inflight=12, backlog=44, max_slots=128)])
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "rpc-slots")
    assert ("network", "retransmissions") in [(str(f.category), f.mechanism)
                                              for f in d.findings[1:]]
    assert "Find where RPCs are lost" in commands(d)


def test_e_single_writer_is_underutilized() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(4000, queue=0.05, rtt=1.8, execute=2.0,
                                                        kib=1024),
                                        "GETATTR": Op.avg(100, rtt=0.4)},
                         conns=[Conn.avg(4100, inflight=1.0, max_slots=2)])
    d = pair(before, after, Environment(link_gbps=200))
    assert (d.attribution, d.mechanism) == (Attribution.UNDERUTILIZED, "low-concurrency")
    assert d.concurrency == pytest.approx(0.8)
    assert d.recommendations[0].action == "Use more parallel writers (or readers)"
    assert "only about 0.8 RPCs" in d.recommendations[0].why


def test_f_small_wsize_is_in_the_fix() -> None:
    before = Mount(wsize=65536)
    d = pair(before, saturated(before, wsize_kib=64))
    assert d.mechanism == "rpc-slots"
    assert d.wsize == 65536
    assert "nconnect=8,wsize=1048576" in (d.recommendations[0].command or "")
    assert d.recommendations[-1].action == "Mount with wsize=1048576 (now 65536)"


@pytest.mark.parametrize(("max_slots", "action", "command"), [
    (64, "Raise the client's NFSv4.1 session slots to 128 (nfs.max_session_slots, default 64)",
     "echo 128 > /sys/module/nfs/parameters/max_session_slots"),
    (30, "Raise the server's NFSv4.1 session slot count", None),
])
def test_g_nfsv41_session_slots(max_slots: int, action: str, command: str | None) -> None:
    before = Mount(vers="4.1")
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(20000, queue=60, rtt=5, kib=1024),
                                        "SEQUENCE": Op.avg(50, rtt=0.4)},
                         conns=[Conn.avg(20050, inflight=max_slots * 0.9, sending=0.2,
                                         max_slots=max_slots)])
    d = pair(before, after, SLOTS_128)
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "session-slots")
    assert d.recommendations[0].action == action
    if command is None:
        assert d.recommendations[0].command is None
    else:
        assert (d.recommendations[0].command or "").startswith(command)
    assert "tcp_max_slot_table_entries" not in commands(d)  # v4.1 transports are unbounded


def test_h_idle() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(3, rtt=1, kib=4),
                                        "GETATTR": Op.avg(40, rtt=0.4)})
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.IDLE, "no-data-traffic")
    assert dict(d.findings[0].evidence)["data_ops"] == 3
    assert "--interval 30" in (d.recommendations[0].command or "")


def test_i_counter_reset_uses_the_second_sample() -> None:
    first = saturated(Mount())
    remounted = Mount(age=30).after(WINDOW_S, ops={"WRITE": Op.avg(400, rtt=1, kib=1024)})
    d = pair(first, remounted)
    assert d.reset is True and d.basis is Basis.SINCE_MOUNT
    assert d.duration_s == 40  # the second sample's age
    assert [o.ops for o in d.ops if o.name == "WRITE"] == [400]
    assert any("counters went backwards" in n for n in d.notes)


def test_transmit_queue_on_one_tcp_stream() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(8000, queue=40, rtt=3, kib=1024),
                                        "GETATTR": Op.avg(100, rtt=0.4)},
                         conns=[Conn.avg(8100, inflight=4, sending=30, max_slots=40)])
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.CLIENT_QUEUE, "transmit-queue")
    assert "nconnect=8" in (d.recommendations[0].command or "")


def test_server_delay_replies_explain_the_queue() -> None:
    before = Mount()
    # 30 NFS3ERR_JUKEBOX replies x 5 s retry wait = 150 s of the 160 s of WRITE queue time.
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(100, queue=1600, rtt=2, kib=1024),
                                        "GETATTR": Op.avg(100, rtt=0.4)}, delay_events=30)
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.SERVER, "server-delay")
    assert dict(d.findings[0].evidence)["delay_replies"] == 30


def test_saturated_link() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(11000, queue=30, rtt=5, kib=1024)})
    d = pair(before, after, Environment(link_gbps=10))
    assert (d.attribution, d.mechanism) == (Attribution.NETWORK, "link-saturated")
    assert d.link_util == pytest.approx(11000 * 1048576 * 8 / WINDOW_S / 10e9, rel=1e-3)


def test_slow_metadata_round_trip_is_the_path() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(500, rtt=14, kib=256),
                                        "GETATTR": Op.avg(300, rtt=12)})
    d = pair(before, after)
    assert (d.attribution, d.mechanism) == (Attribution.NETWORK, "path-latency")


def test_thresholds_move_the_judgement() -> None:
    before = Mount()
    after = before.after(WINDOW_S, ops={"WRITE": Op.avg(3000, queue=0.2, rtt=45, kib=1024),
                                        "GETATTR": Op.avg(500, rtt=0.4)})
    assert pair(before, after).attribution is Attribution.SERVER
    lenient = Thresholds(server_rtt_min_ms=60)
    assert pair(before, after, thresholds=lenient).attribution is Attribution.HEALTHY


def test_nfsv41_over_two_files_without_interval_uses_age() -> None:
    before = Mount(vers="4.2")
    after = before.after(7, ops={"READ": Op.avg(700, rtt=0.6, kib=1024, read=True)})
    d = pair(before, after, interval=None)
    assert d.duration_s == 7
    [read] = [o for o in d.ops if o.name == "READ"]
    assert read.ops_per_s == pytest.approx(100)
    assert read.mb_per_s == pytest.approx(700 * 1048576 / 7 / 1e6, rel=1e-3)


def test_captures_of_different_clients_are_refused() -> None:
    a = parse_mountstats(render(Mount(mountpoint="/a")), "a.txt")
    b = parse_mountstats(render(Mount(mountpoint="/b")), "b.txt")
    with pytest.raises(TelemetryError, match=r"a\.txt and b\.txt have no NFS mount in common"):
        diff(a, b)


def test_mount_added_or_removed_between_samples() -> None:
    a = parse_mountstats(render(Mount(), Mount(mountpoint="/gone")), "a")
    b = parse_mountstats(render(Mount(), Mount(mountpoint="/new")), "b")
    ws = diff(a, b, interval_s=5)
    assert [(w.mount.mountpoint, w.basis) for w in ws.windows] == [
        ("/mnt/ckpt", Basis.INTERVAL), ("/new", Basis.SINCE_MOUNT)]
    assert ws.notes == ("/gone (filer:/ckpt) was unmounted between the samples",)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"queue_share": 1.5}, "nfs.thresholds.queue_share"),
    ({"min_data_ops": -1}, "nfs.thresholds.min_data_ops"),
    ({"backlog_min": float("nan")}, "nfs.thresholds.backlog_min"),
])
def test_threshold_validation_names_the_key(kwargs: dict[str, float], key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        Thresholds(**kwargs)  # type: ignore[arg-type]


def test_environment_validation() -> None:
    with pytest.raises(ConfigError, match=r"nfs\.slot_limit"):
        Environment(slot_limit=0)
    with pytest.raises(ConfigError, match=r"nfs\.link_gbps"):
        Environment(link_gbps=-1.0)


def test_package_exports_import() -> None:
    module = importlib.import_module("trainguard.nfs")
    assert sorted(module.__all__) == sorted(set(module.__all__))
    for name in trainguard.nfs.__all__:
        assert hasattr(module, name), name
