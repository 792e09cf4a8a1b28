"""`trainguard nfs diagnose`: captures, two-sample diffs, live sampling with the wait replaced,
JSON, the mount filter, and one-line errors with their exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import trainguard.cli.nfs as nfs_cli
from trainguard.cli.main import app

DATA = Path(__file__).resolve().parents[2] / "data" / "mountstats"
ISILON = DATA / "pcp-nfs3-nfs4-isilon.mountstats"
RDMA = DATA / "pcp-nfs3-rdma-nconnect8.mountstats"
BLOG = DATA / "blog-nfs3-tcp-localhost.mountstats"

runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["nfs", "diagnose", *args])


def as_json(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return " ".join(result.stderr.split())


# A counter text whose WRITE/xprt numbers grow between two samples: 20 s of saturated writes.
def _sample(age: int, writes: int, queue_ms: int, sends: int, bklog: int) -> str:
    return (
        "device filer:/ckpt mounted on /mnt/ckpt with fstype nfs statvers=1.1\n"
        "\topts:\trw,vers=3,rsize=1048576,wsize=1048576,hard,proto=tcp,timeo=600,retrans=2,"
        "sec=sys,local_lock=none\n"
        f"\tage:\t{age}\n"
        "\tRPC iostats version: 1.1  p/v: 100003/3 (nfs)\n"
        f"\txprt:\ttcp 871 1 1 0 0 {sends} {sends} 0 {sends * 12} {bklog} 128 {sends * 2} "
        f"{sends * 11}\n"
        "\tper-op statistics\n"
        + "".join(f"\t{name:>12}: 0 0 0 0 0 0 0 0 0\n" for name in (
            "NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ"))
        + f"\t       WRITE: {writes} {writes} 0 {writes * 1048576} {writes * 200} {queue_ms} "
          f"{writes * 6} {queue_ms + writes * 6} 0\n"
        + "".join(f"\t{name:>12}: 0 0 0 0 0 0 0 0 0\n" for name in (
            "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK",
            "READDIR", "READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT")))


BEFORE = _sample(age=100, writes=1000, queue_ms=1000, sends=1000, bklog=0)
AFTER = _sample(age=120, writes=41000, queue_ms=1000 + 40000 * 80, sends=41000,
                bklog=40000 * 44)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "before.mountstats", tmp_path / "after.mountstats"
    a.write_text(BEFORE)
    b.write_text(AFTER)
    return a, b


def test_one_capture_table() -> None:
    result = invoke("--mountstats", str(ISILON))
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    for mountpoint in ("/ifs", "/mnt/nfsv4", "/ifsfoo", "/mnt/nfs41"):
        assert mountpoint in out
    assert "attribution: client-queue (transmit-queue)" in out
    assert "attribution: underutilized (low-concurrency)" in out
    assert "$ umount /ifs && mount -t nfs -o vers=3,nconnect=8,wsize=1048576" in out
    assert "4 NFS mount(s)" in result.stderr and "12 non-NFS skipped" in result.stderr


def test_one_capture_json_has_every_mount() -> None:
    doc = as_json(invoke("--mountstats", str(RDMA), "--json", "--slot-limit", "128"))
    assert [(m["mountpoint"], m["attribution"], m["mechanism"]) for m in doc["mounts"]] == [
        ("/storage/group", "client-queue", "rpc-slots"), ("/storage/home", "healthy", "ok"),
        ("/storage/work", "client-queue", "rpc-slots"), ("/storage/pcp-data", "healthy", "ok")]
    assert (doc["slot_limit"], doc["slot_limit_source"]) == (128, "--slot-limit")
    assert doc["non_nfs_mounts_skipped"] == 1
    group = doc["mounts"][0]
    assert {"device", "nfs_version", "proto", "nconnect", "wsize", "rsize", "basis",
            "duration_s", "counters_reset", "findings", "recommendations", "ops", "transport",
            "notes", "concurrency", "link_util"} <= set(group)
    assert (group["nconnect"], group["proto"], group["basis"]) == (8, "rdma", "since-mount")
    assert group["transport"]["connections"] == 8
    assert len(group["transport"]["per_connection"]) == 8
    assert group["recommendations"][0]["n"] == 1
    assert group["findings"][0]["evidence"]["op"] == "WRITE"


def test_two_captures_give_the_interval(pair: tuple[Path, Path]) -> None:
    a, b = pair
    doc = as_json(invoke("--mountstats", str(a), "--mountstats", str(b), "--json",
                         "--link-gbps", "200"))
    [m] = doc["mounts"]
    assert (m["basis"], m["duration_s"]) == ("interval", 20.0)
    assert (m["attribution"], m["mechanism"]) == ("client-queue", "rpc-slots")
    [write] = [o for o in m["ops"] if o["op"] == "WRITE"]
    assert write["ops_per_s"] == 2000.0
    assert write["queue_share"] == pytest.approx(80 / 86, abs=1e-3)
    assert m["link_util"] == pytest.approx(2000 * 1048576 * 8 / 200e9, abs=1e-4)
    assert any("tcp_max_slot_table_entries" in (r["command"] or "")
               for r in m["recommendations"])


def test_interval_flag_overrides_the_age_difference(pair: tuple[Path, Path]) -> None:
    a, b = pair
    doc = as_json(invoke("--mountstats", str(a), "--mountstats", str(b), "--interval", "40",
                         "--json"))
    assert doc["mounts"][0]["duration_s"] == 40.0


def test_swapped_captures_fall_back_to_since_mount(pair: tuple[Path, Path]) -> None:
    a, b = pair
    doc = as_json(invoke("--mountstats", str(b), "--mountstats", str(a), "--json"))
    [m] = doc["mounts"]
    assert (m["counters_reset"], m["basis"]) == (True, "since-mount")
    assert any("wrong order" in n for n in m["notes"])


def test_mount_filter() -> None:
    doc = as_json(invoke("--mountstats", str(ISILON), "--mount", "/ifsfoo/", "--json"))
    assert [m["mountpoint"] for m in doc["mounts"]] == ["/ifsfoo"]


def test_unknown_mount_is_an_error_listing_the_mounts() -> None:
    result = invoke("--mountstats", str(ISILON), "--mount", "/nope")
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "no NFS mount at /nope" in line and "/ifs, /ifsfoo, /mnt/nfs41, /mnt/nfsv4" in line


def test_truncated_capture_is_one_line_exit_2(tmp_path: Path) -> None:
    cut = tmp_path / "cut.mountstats"
    text = BLOG.read_text()
    cut.write_text(text[:text.index("WRITE:") + 12])
    result = invoke("--mountstats", str(cut))
    assert result.exit_code == 2
    line = one_error_line(result)
    assert f"{cut}:18: per-op line 'WRITE' has 3 counters" in line


def test_unknown_version_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "v5.mountstats"
    bad.write_text(BLOG.read_text().replace("vers=3,", "vers=5,"))
    result = invoke("--mountstats", str(bad), "--json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "NFS mount /mnt (localhost:/tmp/s_test): unknown NFS version vers=5" in (
        one_error_line(result))


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_no_nfs_mount_is_one_line_exit_2(tmp_path: Path, json_flag: list[str]) -> None:
    local = tmp_path / "local.mountstats"
    local.write_text("device proc mounted on /proc with fstype proc\n"
                     "device /dev/sda1 mounted on / with fstype ext4\n")
    result = invoke("--mountstats", str(local), *json_flag)
    assert result.exit_code == nfs_cli.EXIT_NO_NFS == 2
    line = one_error_line(result)
    assert f"no NFS mount in {local} (2 other mounts): nothing to diagnose" in line
    assert result.stdout == ""


def test_three_files_is_a_usage_error() -> None:
    result = invoke("--mountstats", str(BLOG), "--mountstats", str(BLOG), "--mountstats",
                    str(BLOG))
    assert result.exit_code == 2
    assert "give --mountstats once" in one_error_line(result)


@pytest.mark.parametrize("name", ["missing.mountstats", ""])
def test_unreadable_path_is_a_clear_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / name  # a file that does not exist, or a directory
    result = invoke("--mountstats", str(path))
    assert result.exit_code == 2
    assert f"cannot read {path}" in one_error_line(result)


def test_captures_of_different_clients_are_refused(tmp_path: Path) -> None:
    result = invoke("--mountstats", str(BLOG), "--mountstats", str(ISILON))
    assert result.exit_code == 2
    assert "have no NFS mount in common" in one_error_line(result)


def test_live_sampling_with_the_wait_replaced(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    live = tmp_path / "mountstats"
    live.write_text(BEFORE)
    now = [1000.0]
    waited: list[float] = []

    def fake_wait(seconds: float) -> None:
        # The workload runs while we "sleep": the second read sees the later counters.
        waited.append(seconds)
        now[0] += seconds
        live.write_text(AFTER)

    monkeypatch.setattr(nfs_cli, "LIVE_MOUNTSTATS", live)
    monkeypatch.setattr(nfs_cli, "_wait", fake_wait)
    monkeypatch.setattr(nfs_cli, "_clock", lambda: now[0])
    limit = tmp_path / "tcp_max_slot_table_entries"
    limit.write_text("128\n")
    monkeypatch.setattr("trainguard.nfs.source.TCP_SLOT_LIMIT", limit)
    doc = as_json(invoke("--interval", "2.5", "--json"))
    assert waited == [2.5]
    assert doc["source"] == f"{live}, sampled 2.5 s apart"
    assert (doc["slot_limit"], doc["slot_limit_source"]) == (128, str(limit))
    [m] = doc["mounts"]
    assert (m["basis"], m["duration_s"]) == ("interval", 2.5)
    assert (m["attribution"], m["mechanism"]) == ("client-queue", "rpc-slots")
    evidence = m["findings"][0]["evidence"]
    assert (evidence["slot_limit"], evidence["connections_at_limit"]) == (128, 1)


def test_live_interval_zero_reads_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = tmp_path / "mountstats"
    live.write_text(AFTER)
    monkeypatch.setattr(nfs_cli, "LIVE_MOUNTSTATS", live)

    def no_wait(seconds: float) -> None:
        raise AssertionError("--interval 0 must not wait")

    monkeypatch.setattr(nfs_cli, "_wait", no_wait)
    doc = as_json(invoke("--interval", "0", "--json"))
    assert doc["mounts"][0]["basis"] == "since-mount"


def test_negative_interval_is_a_usage_error() -> None:
    assert invoke("--mountstats", str(BLOG), "--interval", "-1").exit_code == 2


def test_interval_with_one_capture_warns() -> None:
    result = invoke("--mountstats", str(BLOG), "--interval", "5")
    assert result.exit_code == 0
    assert "warning: --interval is ignored for one capture file" in result.stderr


# --- nothing to diagnose is refused before the live wait -----------------------------------------

LOCAL_ONLY = ("device proc mounted on /proc with fstype proc\n"
              "device /dev/sda1 mounted on / with fstype ext4\n")


@pytest.mark.parametrize(("text", "args", "words"), [
    (LOCAL_ONLY, [], "(2 other mounts): nothing to diagnose"),
    (LOCAL_ONLY, ["--json"], "(2 other mounts): nothing to diagnose"),
    (BEFORE, ["--mount", "/nope"], "no NFS mount at /nope in"),
])
def test_live_read_without_the_mount_fails_before_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, args: list[str],
        words: str) -> None:
    live = tmp_path / "mountstats"
    live.write_text(text)
    waited: list[float] = []
    monkeypatch.setattr(nfs_cli, "LIVE_MOUNTSTATS", live)
    monkeypatch.setattr(nfs_cli, "_wait", waited.append)
    result = invoke("--interval", "60", *args)
    assert result.exit_code == 2
    assert words in one_error_line(result)
    assert waited == []  # refused on the first read, not after the interval
    assert result.stdout == ""


# --- a partial paste: xprt: lines, no per-op section ---------------------------------------------

def _no_per_op(text: str) -> str:
    return text[:text.index("\tper-op statistics")]


def test_partial_capture_is_diagnosed_from_the_transport(tmp_path: Path) -> None:
    paste = tmp_path / "paste.txt"
    paste.write_text(_no_per_op(AFTER))
    result = invoke("--mountstats", str(paste))
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "(missing)" in text and "client-queue (rpc-slots)" in text
    assert "no per-op statistics" in text
    [m] = as_json(invoke("--mountstats", str(paste), "--json"))["mounts"]
    assert (m["per_op_missing"], m["ops"], m["mechanism"]) == (True, [], "rpc-slots")
    # AFTER's transport: 40000 * 44 + 0 backlog over 41000 sends
    assert m["transport"]["backlog"] == pytest.approx(40000 * 44 / 41000, abs=1e-3)


def test_partial_second_capture_gives_the_interval_transport(pair: tuple[Path, Path]) -> None:
    before, after = pair
    after.write_text(_no_per_op(AFTER))
    [m] = as_json(invoke("--mountstats", str(before), "--mountstats", str(after),
                         "--json"))["mounts"]
    assert (m["basis"], m["per_op_missing"], m["mechanism"]) == ("interval", True, "rpc-slots")
    assert m["transport"]["backlog"] == pytest.approx(44.0)  # the interval's: 40000*44 / 40000
