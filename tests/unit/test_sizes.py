"""Sizes as people write them and as reports print them (`trainguard.sizes`)."""

from __future__ import annotations

import pytest

from trainguard.errors import ConfigError
from trainguard.sizes import format_size, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("4096", 4096), ("8GiB", 8 << 30), ("8gib", 8 << 30), ("8 GiB", 8 << 30), ("2GB", 2 * 10**9),
    ("512MiB", 512 << 20), ("512Mi", 512 << 20), ("100M", 100 << 20), ("1.5GiB", 3 << 29),
    ("1.5 KiB", 1536), (".5MiB", 1 << 19), ("1k", 1024), ("1kb", 1000), ("1TiB", 1 << 40),
    ("1PiB", 1 << 50), ("10B", 10), (" 3MiB ", 3 << 20), ("0", 0),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "bad size 'abc'"), ("", "bad size"), ("-1GiB", "bad size '-1GiB'"),
    ("1XB", "bad size"), ("GiB", "bad size"), ("1.5", "not a whole number of bytes"),
    ("0.5B", "not a whole number"), ("1e9", "bad size"), ("1,5GiB", "bad size"),
])
def test_parse_size_rejects(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_size(text)


@pytest.mark.parametrize(("nbytes", "text"), [
    (100, "100 B"), (4096, "4.0 KiB"), (512 << 20, "512.0 MiB"), (2 << 30, "2.00 GiB"),
    (1 << 50, "1.00 PiB"),
])
def test_format_size(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text
