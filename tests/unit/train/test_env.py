from __future__ import annotations

import time
from pathlib import Path

import pytest

from trainguard.errors import ConfigError
from trainguard.faultspec import FaultKind
from trainguard.train import TrainEnv
from trainguard.train.env import DEFAULT_HEARTBEAT_S, process_start_time, start_time_from_stat


def test_empty_environment_is_unsupervised() -> None:
    env = TrainEnv.from_environ({})
    assert env == TrainEnv()
    assert not env.supervised and env.heartbeat_s == DEFAULT_HEARTBEAT_S and env.attempt == 0


def test_every_variable() -> None:
    env = TrainEnv.from_environ(
        {
            "TRAINGUARD_EVENTS": "/run/events/rank1.jsonl",
            "TRAINGUARD_NODE": "node2",
            "TRAINGUARD_RUN_DIR": "/run",
            "TRAINGUARD_ATTEMPT": "2",
            "TRAINGUARD_LAUNCH_TIME": "1718000000.25",
            "TRAINGUARD_INJECT": "kill:rank=1;nan:step=30;",
            "TRAINGUARD_RESUME_MAX_STEP": "40",
            "TRAINGUARD_HEARTBEAT_S": "2",
            "RANK": "1",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "4",
        }
    )
    assert env.supervised and env.events_path == Path("/run/events/rank1.jsonl")
    assert (env.node, env.run_dir, env.attempt) == ("node2", Path("/run"), 2)
    assert env.launch_time == 1718000000.25 and env.resume_max_step == 40
    assert env.heartbeat_s == 2.0
    assert (env.rank, env.local_rank, env.world_size) == (1, 1, 4)
    assert [f.kind for f in env.faults] == [FaultKind.KILL, FaultKind.NAN]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TRAINGUARD_ATTEMPT", "first", "TRAINGUARD_ATTEMPT must be an integer"),
        ("TRAINGUARD_ATTEMPT", "-1", "TRAINGUARD_ATTEMPT must be >= 0"),
        ("TRAINGUARD_LAUNCH_TIME", "yesterday", "TRAINGUARD_LAUNCH_TIME must be a number"),
        ("TRAINGUARD_HEARTBEAT_S", "nan", "TRAINGUARD_HEARTBEAT_S must be a finite number"),
        ("TRAINGUARD_RESUME_MAX_STEP", "4.5", "TRAINGUARD_RESUME_MAX_STEP must be an integer"),
        ("TRAINGUARD_INJECT", "nan:step=x", "TRAINGUARD_INJECT: invalid fault spec"),
        ("RANK", "zero", "RANK must be an integer"),
        ("WORLD_SIZE", "0", "WORLD_SIZE must be >= 1"),
    ],
)
def test_malformed_variable_is_named(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainEnv.from_environ({name: value})


@pytest.mark.parametrize(
    ("events", "extra", "expected"),
    [
        ("/run/r{rank}.jsonl", {"RANK": "3"}, "/run/r3.jsonl"),
        (
            "/run/r{rank}.a{restart}.jsonl",
            {"RANK": "1", "TORCHELASTIC_RESTART_COUNT": "2"},
            "/run/r1.a2.jsonl",
        ),
        ("/run/r{rank}.a{restart}.jsonl", {}, "/run/r0.a0.jsonl"),
        ("/run/{node}/events.jsonl", {"RANK": "1"}, "/run/{node}/events.jsonl"),
    ],
)
def test_events_path_placeholders(events: str, extra: dict[str, str], expected: str) -> None:
    env = TrainEnv.from_environ({"TRAINGUARD_EVENTS": events, **extra})
    assert env.events_path == Path(expected)


def test_events_path_placeholder_with_malformed_restart_count() -> None:
    with pytest.raises(ConfigError, match="TORCHELASTIC_RESTART_COUNT must be an integer"):
        TrainEnv.from_environ(
            {"TRAINGUARD_EVENTS": "/r.a{restart}", "TORCHELASTIC_RESTART_COUNT": "x"}
        )


def test_start_time_from_stat_counts_fields_after_the_command_name() -> None:
    # comm "(a b) c" holds a space and a ')'; starttime (field 22) is 5000 ticks after boot.
    rest = " ".join(["S", *["0"] * 18, "5000", "0"])
    stat = f"4242 ((a b) c) {rest}\n"
    # booted 100 s before now=1_000_000: started 50 s after boot, i.e. 50 s ago
    assert start_time_from_stat(stat, 100, 100.0, 1_000_000.0) == 999_950.0


@pytest.mark.parametrize("stat", ["", "4242 (python) S 1 2", "4242 python S " + "0 " * 30])
def test_start_time_from_stat_rejects_malformed_lines(stat: str) -> None:
    with pytest.raises(ValueError, match="not a /proc"):
        start_time_from_stat(stat, 100, 100.0, 1_000_000.0)


def test_process_start_time_is_recent_or_unknown() -> None:
    started = process_start_time()
    if started is None:
        pytest.skip("no /proc here")
    assert time.time() - 24 * 3600 < started <= time.time() + 1
