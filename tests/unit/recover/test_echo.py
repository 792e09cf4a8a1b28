"""The rank-output echo: a failure's consequential tracebacks folded, the culprit's in full."""

from __future__ import annotations

from trainguard.recover.echo import RankEcho, after_what, exception_excerpt, fold_line
from trainguard.recover.failure import Failure, FailureKind
from trainguard.taxonomy import Category

RESET = [
    "[rank2]: Traceback (most recent call last):",
    '[rank2]:   File "/w/train.py", line 144, in rank_ordered_mean',
    "[rank2]:     dist.all_gather(parts, tensor.contiguous())",
    "[rank2]:     ^^^^^^^^^^^^^^^",
    "[rank2]: RuntimeError: [gloo/pair.cc:537] Read error: Connection reset by peer.",
]
BOOM = [
    "Traceback (most recent call last):",
    '  File "/w/train.py", line 9, in <module>',
    "    step()",
    "ValueError: the culprit's own error",
]


class Screen:
    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []

    def __call__(self, rank: int, node: str, line: str) -> None:
        self.lines.append((rank, line))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def feed(echo: RankEcho, rank: int, lines: list[str], now: float = 0.0) -> None:
    for line in lines:
        echo.feed(rank, f"n{rank}", line, now)


def test_ordinary_lines_pass_at_once_and_tracebacks_wait() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 0, ["step 10 loss 2.9"])
    feed(echo, 2, RESET)
    assert screen.lines == [(0, "step 10 loss 2.9")]


def test_the_culprit_in_full_the_consequences_one_line_each() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 2, RESET)
    feed(echo, 1, BOOM)
    feed(echo, 0, [line.replace("rank2", "rank0") for line in RESET])
    echo.release(1.0, trouble=True)
    assert screen.lines == []
    echo.settle(culprits={1}, logs={0: "a/r0.log", 2: "a/r2.log"}, why="rank 1 failed")
    # the culprit first, whole; then one line per other rank, naming its log
    assert [line for _, line in screen.lines[:len(BOOM)]] == BOOM
    folded = screen.lines[len(BOOM):]
    assert [r for r, _ in folded] == [0, 2]
    assert all("1 traceback after rank 1 failed not shown" in line for _, line in folded)
    assert "Connection reset by peer" in folded[1][1] and "a/r2.log" in folded[1][1]
    assert "Traceback" not in "".join(line for _, line in folded)


def test_a_healthy_attempts_traceback_is_shown_after_the_hold() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 0, BOOM, now=100.0)
    feed(echo, 0, ["step 11 loss 2.8"], now=100.5)  # training goes on: the block is closed
    echo.release(104.0, trouble=False)
    assert screen.lines == [(0, "step 11 loss 2.8")]
    echo.release(105.5, trouble=False)
    assert [line for _, line in screen.lines[1:]] == BOOM


def test_a_complete_traceback_with_no_line_after_it_is_released_too() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=2.0)
    feed(echo, 0, BOOM, now=10.0)
    echo.release(12.5, trouble=False)
    assert [line for _, line in screen.lines] == BOOM


def test_trouble_holds_everything_until_the_verdict() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=1.0)
    feed(echo, 2, RESET, now=0.0)
    echo.release(60.0, trouble=True)
    assert screen.lines == []


def test_chained_exceptions_and_torch_context_stay_one_traceback() -> None:
    chained = [
        *BOOM,
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/w/train.py", line 12, in <module>',
        "RuntimeError: NCCL communicator was aborted",
        "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/Work.cpp:42",
        "frame #0: c10::Error::Error(...) + 0x98 (0x7f in libc10.so)",
        "frame #1: <unknown function> + 0x1234 (0x7f in libtorch.so)",
    ]
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 3, chained)
    feed(echo, 3, ["after it"])
    assert screen.lines == [(3, "after it")]
    echo.settle(culprits=(), logs={}, why="the hang")
    assert len(screen.lines) == 2
    assert screen.lines[1][1].startswith("(1 traceback after the hang not shown: RuntimeError: "
                                         "NCCL communicator was aborted")


def test_several_tracebacks_of_one_rank_are_counted() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 2, RESET)
    feed(echo, 2, ["[rank2]: some warning in between"])
    feed(echo, 2, RESET)
    echo.settle(culprits={0}, logs={}, why="rank 0 failed")
    assert screen.lines[-1][1].startswith("(2 tracebacks after rank 0 failed not shown")
    assert screen.lines[0] == (2, "[rank2]: some warning in between")


def test_after_a_success_every_held_traceback_is_shown() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 0, BOOM)
    feed(echo, 1, RESET)
    echo.settle(culprits=None, logs={}, why="")
    assert len(screen.lines) == len(BOOM) + len(RESET)


def test_a_traceback_cut_by_an_unprefixed_line_is_closed_there() -> None:
    screen = Screen()
    echo = RankEcho(screen, hold_s=5.0)
    feed(echo, 2, RESET[:3])
    feed(echo, 2, ["unprefixed line"])
    assert screen.lines == [(2, "unprefixed line")]
    echo.settle(culprits=(), logs={}, why="rank 0 failed")
    assert screen.lines[-1][1] == "(1 traceback after rank 0 failed not shown)"


def test_summaries_read_well() -> None:
    long = "RuntimeError: " + "x " * 200
    assert len(exception_excerpt(long)) <= 160 and exception_excerpt(long).endswith("…")
    assert fold_line(1, "E: e", "rank 1 failed", "r.log") == \
        "(1 traceback after rank 1 failed not shown: E: e; full text in r.log)"
    crash = Failure(FailureKind.CRASH, Category.UNKNOWN, "s", ("n1",), 1)
    assert after_what(crash) == "rank 1 failed"
    node = Failure(FailureKind.NODE, Category.GPU_HARDWARE, "s", ("n1", "n2"))
    assert after_what(node) == "n1, n2 failed"
    assert after_what(Failure(FailureKind.HANG, Category.NCCL_TIMEOUT_HANG, "s")) == "the hang"
