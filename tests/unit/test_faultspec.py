from __future__ import annotations

import pytest

from trainguard.errors import ConfigError, TrainguardError
from trainguard.faultspec import (
    SDK_KINDS,
    SUPERVISOR_KINDS,
    FaultKind,
    FaultSpec,
    format_fault,
    join_faults,
    parse_fault,
    parse_faults,
    split_faults,
)

VALID = [
    ("kill:rank=1,step=20", FaultSpec(FaultKind.KILL, rank=1, step=20)),
    ("nan:step=30", FaultSpec(FaultKind.NAN, step=30)),
    (
        "xid:node=node2,xid=79,after=5",
        FaultSpec(FaultKind.XID, node="node2", xid=79, after_s=5.0),
    ),
    ("slow:rank=0,delay=0.3", FaultSpec(FaultKind.SLOW, rank=0, delay_s=0.3)),
    ("corrupt_checkpoint:step=40", FaultSpec(FaultKind.CORRUPT_CHECKPOINT, step=40)),
    ("hang", FaultSpec(FaultKind.HANG)),
    ("hang:rank=3,after=12.5", FaultSpec(FaultKind.HANG, rank=3, after_s=12.5)),
    ("cuda_error:step=7,code=3", FaultSpec(FaultKind.CUDA_ERROR, step=7, exit_code=3)),
    ("exception:step=17,rank=1", FaultSpec(FaultKind.EXCEPTION, rank=1, step=17)),
    ("exception:attempt=*", FaultSpec(FaultKind.EXCEPTION, attempt=None)),
    ("kill:attempt=2", FaultSpec(FaultKind.KILL, attempt=2)),
    ("xid:xid=48,node=gpu-node01.a", FaultSpec(FaultKind.XID, xid=48, node="gpu-node01.a")),
    # Case, whitespace and key order do not matter.
    ("  NaN : Step = 3 , Rank = 2 ", FaultSpec(FaultKind.NAN, rank=2, step=3)),
    ("slow:delay=0", FaultSpec(FaultKind.SLOW, delay_s=0.0)),
    ("kill:after=0.25", FaultSpec(FaultKind.KILL, after_s=0.25)),
]


@pytest.mark.parametrize(("text", "expected"), VALID, ids=[t for t, _ in VALID])
def test_parse_valid(text: str, expected: FaultSpec) -> None:
    assert parse_fault(text) == expected


@pytest.mark.parametrize(("text", "expected"), VALID, ids=[t for t, _ in VALID])
def test_round_trip(text: str, expected: FaultSpec) -> None:
    canonical = format_fault(expected)
    assert str(expected) == canonical
    assert parse_fault(canonical) == expected
    assert format_fault(parse_fault(canonical)) == canonical  # canonical is a fixed point


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        (FaultSpec(FaultKind.KILL, rank=1, step=20), "kill:rank=1,step=20"),
        (FaultSpec(FaultKind.XID, node="node2", after_s=5.0), "xid:node=node2,after=5"),
        (FaultSpec(FaultKind.SLOW, rank=0, delay_s=0.3), "slow:rank=0,delay=0.3"),
        (FaultSpec(FaultKind.NAN), "nan"),
        (FaultSpec(FaultKind.EXCEPTION, attempt=None), "exception:attempt=*"),
        (FaultSpec(FaultKind.CUDA_ERROR, exit_code=2, step=1), "cuda_error:step=1,code=2"),
        (FaultSpec(FaultKind.XID, xid=79), "xid"),  # defaults are left out
    ],
)
def test_canonical_text(spec: FaultSpec, canonical: str) -> None:
    assert format_fault(spec) == canonical


ERRORS = [
    ("", "empty"),
    ("   ", "empty"),
    ("explode:step=1", "unknown fault kind 'explode'"),
    (":step=1", "missing fault kind"),
    ("nan:", "nothing after ':'"),
    ("nan:stp=3", "unknown key 'stp'"),
    ("nan:step", "expected key=value"),
    ("nan:=3", "expected key=value"),
    ("nan:step=3,step=4", "duplicate key 'step'"),
    ("nan:step=", "empty value for 'step'"),
    ("nan:step=x", "step must be a non-negative integer"),
    ("nan:step=1.5", "step must be a non-negative integer"),
    ("nan:step=-1", "step must be >= 0"),
    ("kill:rank=-2", "rank must be >= 0"),
    ("kill:after=soon", "after must be a number"),
    ("kill:after=-1", "after must be >= 0"),
    ("kill:after=nan", "after must be finite"),
    ("slow:delay=inf", "delay must be finite"),
    ("kill:attempt=-1", "attempt must be >= 0"),
    ("kill:attempt=any", "attempt must be a non-negative integer"),
    ("cuda_error:code=256", "code must be <= 255"),
    ("xid:xid=seventy", "xid must be a non-negative integer"),
    ("xid:node=a b", "node must be a host name"),
    ("nan:xid=79", "key 'xid' only applies to kind xid"),
    ("kill:delay=1", "key 'delay' only applies to kind slow"),
    ("exception:code=2", "key 'code' only applies to kind cuda_error"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS, ids=[t or "<empty>" for t, _ in ERRORS])
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_fault(text)
    assert "\n" not in str(info.value)
    if text.strip():
        assert repr(text.strip()) in str(info.value)  # the message names the spec
    assert isinstance(info.value, TrainguardError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": -1}, "rank must be >= 0"),
        ({"step": True}, "step must be an integer"),
        ({"delay_s": -0.5}, "delay must be a finite number >= 0"),
        ({"after_s": float("inf")}, "after must be a finite number >= 0"),
        ({"exit_code": 300}, "code must be <= 255"),
        ({"node": "a,b"}, "node must be a host name"),
    ],
)
def test_constructor_validates(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FaultSpec(FaultKind.KILL, **kwargs)  # type: ignore[arg-type]


def test_kind_sets_partition_the_kinds() -> None:
    assert set(FaultKind) == SDK_KINDS | SUPERVISOR_KINDS
    assert not SDK_KINDS & SUPERVISOR_KINDS
    assert parse_fault("nan").in_sdk and not parse_fault("kill").in_sdk


@pytest.mark.parametrize(
    ("text", "attempt", "rank", "node", "expected"),
    [
        ("nan:step=3", 0, 0, None, True),
        ("nan:step=3", 0, 5, None, True),  # no rank: every rank
        ("nan:step=3", 1, 0, None, False),  # default attempt 0 only
        ("nan:attempt=*", 7, 1, None, True),
        ("nan:attempt=2", 2, 1, None, True),
        ("kill:rank=1", 0, 1, None, True),
        ("kill:rank=1", 0, 0, None, False),
        ("kill:rank=1", 0, None, None, True),  # no rank given: no rank filter
        ("xid:node=n2", 0, None, "n2", True),
        ("xid:node=n2", 0, None, "n1", False),
        ("xid:node=n2", 0, None, None, True),
    ],
)
def test_applies_to(
    text: str, attempt: int, rank: int | None, node: str | None, expected: bool
) -> None:
    assert parse_fault(text).applies_to(attempt, rank, node) is expected


def test_join_and_split() -> None:
    specs = parse_faults(["kill:rank=1,step=20", "nan:step=30", "slow:delay=0.3"])
    joined = join_faults(specs)
    assert joined == "kill:rank=1,step=20;nan:step=30;slow:delay=0.3"
    assert split_faults(joined) == specs
    assert split_faults(" nan:step=1 ;; kill ; ") == parse_faults(["nan:step=1", "kill"])
    assert split_faults("") == ()
    assert join_faults([]) == ""


def test_split_error_names_the_bad_piece() -> None:
    with pytest.raises(ConfigError, match="invalid fault spec 'nan:step=x'"):
        split_faults("kill;nan:step=x")
