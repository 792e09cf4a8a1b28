"""Slurm hostlist expressions (expected values checked against scontrol 22.05 where it agrees)."""

from __future__ import annotations

import re

import pytest

from trainguard.errors import ConfigError
from trainguard.recover.slurm import compress_hostlist, expand_hostlist
from trainguard.recover.slurm.hostlist import MAX_NAMES

EXPAND = [
    ("", ()),
    ("   ", ()),
    ("node1", ("node1",)),
    ("node1,node2", ("node1", "node2")),
    (" node1 , node2 ", ("node1", "node2")),
    ("node1 node2\tnode3\n", ("node1", "node2", "node3")),
    ("n,,m", ("n", "m")),
    ("node[1-3,7]", ("node1", "node2", "node3", "node7")),
    ("node[1-3]", ("node1", "node2", "node3")),
    ("node[7]", ("node7",)),
    ("gpu[001-003]", ("gpu001", "gpu002", "gpu003")),
    ("n[8-11]", ("n8", "n9", "n10", "n11")),
    ("n[08-11]", ("n08", "n09", "n10", "n11")),
    ("n[98-101]", ("n98", "n99", "n100", "n101")),
    ("n[01-3]", ("n01", "n02", "n03")),  # width from the low end, as Slurm
    ("n[1-03]", ("n1", "n2", "n3")),
    ("n[3,1,2]", ("n3", "n1", "n2")),  # order kept
    ("n[1,1]", ("n1", "n1")),  # duplicates kept
    ("n[ 1 - 2 ]", ("n1", "n2")),
    ("[1-2]", ("1", "2")),
    ("rack[1-2]-n[01-02]", ("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02")),
    ("n[1-2][3-4]", ("n13", "n14", "n23", "n24")),
    ("node[1-2],gpu[3]", ("node1", "node2", "gpu3")),
    ("a-[1-2].cluster", ("a-1.cluster", "a-2.cluster")),  # suffix: Slurm 22.05 refuses it
    ("dgx-h100-[07-08],login", ("dgx-h100-07", "dgx-h100-08", "login")),
]


@pytest.mark.parametrize(("expr", "names"), EXPAND)
def test_expand(expr: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(("expr", "message"), [
    ("node[1-3", "unclosed"),
    ("node1]", "without"),
    ("n[[1]]", "nested"),
    ("node[5-3]", "reversed range '5-3'"),
    ("x[a-b]", "invalid range 'a-b'"),
    ("n[]", "invalid range ''"),
    ("n[1-2,]", "invalid range ''"),
    ("n[-2]", "invalid range '-2'"),
    ("n[1-]", "invalid range '1-'"),
    ("n[1.5]", "invalid range"),
    ("n[\u0661-\u0663]", "invalid range"),  # Arabic-Indic digits are not Slurm digits
    ("n[1-100001]", "more than 100000"),
    ("a[1-1000]b[1-1000]", "more than 100000"),
])
def test_expand_rejects_with_the_expression(expr: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        expand_hostlist(expr)
    assert f"hostlist {expr!r}" in str(info.value)


def test_expand_limit_is_inclusive() -> None:
    assert len(expand_hostlist(f"n[1-{MAX_NAMES}]")) == MAX_NAMES


COMPRESS = [
    ([], ""),
    (["node1"], "node1"),
    (["node1", "node2", "node3", "node7"], "node[1-3,7]"),
    (["gpu001", "gpu002", "gpu003"], "gpu[001-003]"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["n09", "n10"], "n[09-10]"),
    (["n099", "n100"], "n[099-100]"),
    (["n1", "n01"], "n[1,01]"),  # different widths: not one range
    (["n1", "n3", "n2"], "n[1,3,2]"),  # order kept
    (["n1", "n1"], "n[1,1]"),
    (["login", "node1", "node2", "db"], "login,node[1-2],db"),
    (["rack1-n01", "rack1-n02", "rack2-n01"], "rack1-n[01-02],rack2-n01"),
    (["a1", "b1", "a2"], "a1,b1,a2"),
    (["1", "2", "3"], "[1-3]"),
    (["node-a", "node-b"], "node-a,node-b"),
]


@pytest.mark.parametrize(("names", "expr"), COMPRESS)
def test_compress(names: list[str], expr: str) -> None:
    assert compress_hostlist(names) == expr
    assert expand_hostlist(expr) == tuple(names)


@pytest.mark.parametrize("expr", [e for e, _ in EXPAND])
def test_round_trip(expr: str) -> None:
    names = expand_hostlist(expr)
    assert expand_hostlist(compress_hostlist(names)) == names


@pytest.mark.parametrize("bad", ["node[1]", "a,b", "a b", ""])
def test_compress_refuses_names_a_hostlist_cannot_hold(bad: str) -> None:
    with pytest.raises(ConfigError, match="cannot appear in a hostlist"):
        compress_hostlist(["node1", bad])
