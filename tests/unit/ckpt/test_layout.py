"""Stripe layout arithmetic and manifest checksums (pure)."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pytest

from trainguard.ckpt.digest import digest_bytes, new_digest
from trainguard.ckpt.layout import ALIGN, PAGE, PAGE_FROM, StripeLayout, place
from trainguard.ckpt.manifest import FileEntry, Manifest, validate_manifest
from trainguard.errors import CheckpointError, ConfigError


@pytest.mark.parametrize(
    ("sizes", "offsets", "total"),
    [
        ([], [], 0),
        ([1], [0], 1),
        ([1, 1], [0, 64], 65),
        ([64, 0, 3], [0, 64, 64], 67),
        ([10, PAGE_FROM], [0, PAGE], PAGE + PAGE_FROM),
        ([PAGE_FROM + 1, 5], [0, PAGE_FROM + 64], PAGE_FROM + 69),
    ],
)
def test_place(sizes: list[int], offsets: list[int], total: int) -> None:
    assert place(sizes) == (offsets, total)


def test_place_never_overlaps_and_aligns() -> None:
    rng = random.Random(1)
    choices = [0, 1, 7, 63, 64, 65, 4095, PAGE_FROM, 3 * PAGE_FROM + 5]
    sizes = [rng.choice(choices) for _ in range(300)]
    offsets, total = place(sizes)
    end = 0
    for size, offset in zip(sizes, offsets, strict=True):
        assert offset >= end
        assert offset % (PAGE if size >= PAGE_FROM else ALIGN) == 0
        end = offset + size
    assert total == end


@pytest.mark.parametrize("total", [0, 1, 4095, 4096, 4097, 10 * 4096 + 17])
@pytest.mark.parametrize("streams", [1, 2, 3, 8])
def test_chunks_cover_the_stream_once_in_round_robin(total: int, streams: int) -> None:
    layout = StripeLayout.plan(total, 4096, streams)
    assert 1 <= layout.streams <= streams
    covered = sorted(c for k in range(layout.streams) for c in layout.chunks(k))
    position = 0
    for start, length in covered:
        assert start == position and 0 < length <= 4096
        position += length
    assert position == total
    assert sum(layout.file_size(k) for k in range(layout.streams)) == total
    for k in range(layout.streams):  # chunk j lives in file j % streams, in order
        assert [s // 4096 % layout.streams for s, _ in layout.chunks(k)] == [k] * len(
            layout.chunks(k))


def test_layout_json_round_trip_and_bad_values() -> None:
    layout = StripeLayout(100, 4096, 3)
    assert StripeLayout.from_json(layout.to_json()) == layout
    with pytest.raises(CheckpointError, match="missing stripe fields"):
        StripeLayout.from_json({"total_bytes": 1})
    with pytest.raises(CheckpointError, match="must be integers"):
        StripeLayout.from_json({"total_bytes": "1", "stripe_bytes": 1, "streams": 1})
    with pytest.raises(CheckpointError, match="streams must be >= 1"):
        StripeLayout.from_json({"total_bytes": 1, "stripe_bytes": 1, "streams": 0})
    with pytest.raises(ConfigError):
        StripeLayout(1, 0, 1)


def test_crc32_digest_is_incremental_zlib_crc32() -> None:
    data = bytes(range(256)) * 1000
    digest = new_digest("crc32")
    for i in range(0, len(data), 999):
        digest.update(data[i : i + 999])
    assert digest.hexdigest() == f"{zlib.crc32(data):08x}" == digest_bytes("crc32", data)
    with pytest.raises(ConfigError, match="checksum must be one of"):
        new_digest("md5")


def test_manifest_carries_algorithm_and_meta(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"hello")
    (tmp_path / "b.bin").write_bytes(b"world")
    manifest = Manifest(step=1, created=0.0, files={
        "a.bin": FileEntry(5, digest_bytes("crc32", b"hello"), "crc32"),
        "b.bin": FileEntry(5, digest_bytes("sha256", b"world"))}, meta={"kind": "tensors"})
    data = json.loads(manifest.to_json())
    assert set(data["files"]["a.bin"]) == {"size", "crc32"}
    assert set(data["files"]["b.bin"]) == {"size", "sha256"}
    assert data["meta"] == {"kind": "tensors"}
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert validate_manifest(tmp_path, manifest) is None
    (tmp_path / "b.bin").write_bytes(b"World")
    assert validate_manifest(tmp_path, manifest) == "sha256 mismatch for b.bin"
    assert validate_manifest(tmp_path, manifest, only=frozenset({"a.bin"})) is None
    (tmp_path / "a.bin").write_bytes(b"hellO")
    assert validate_manifest(tmp_path, manifest) == "crc32 mismatch for a.bin"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"size": 1}, "exactly one checksum"),
        ({"size": 1, "crc32": "00000000", "sha256": "0" * 64}, "exactly one checksum"),
        ({"size": 1, "crc32": "0000"}, "bad crc32"),
        ({"size": -1, "crc32": "00000000"}, "bad size"),
        ("x", "not an object"),
    ],
)
def test_manifest_rejects_bad_entries(entry: object, message: str) -> None:
    text = json.dumps({"format": "trainguard-checkpoint/1", "step": 1, "created": 0,
                       "files": {"a.bin": entry}})
    with pytest.raises(CheckpointError, match=message):
        Manifest.from_json(text)
