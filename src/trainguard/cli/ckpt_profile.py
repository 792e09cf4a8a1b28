"""`trainguard ckpt profile`: where a checkpoint's save and load time goes on one filesystem, per
stream count, against torch.save / torch.load and raw writes of the same bytes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainguard.ckpt.profile import (
    ProfileConfig,
    ProfileResult,
    StreamProfile,
    Timing,
    run_profile,
)
from trainguard.cli.console import err, fail, out, stderr_is_tty, warn
from trainguard.cli.tables import print_table
from trainguard.errors import ConfigError, TrainguardError
from trainguard.sizes import format_size, parse_size

__all__ = ["profile"]

_T = TypeVar("_T")

_BASELINE_ROWS = (
    ("torch_save", "torch.save (into the page cache)"),
    ("torch_fsync", "  its fsync"),
    ("torch_total", "torch.save + fsync"),
    ("torch_load", "torch.load (cold)"),
    ("raw_write", "raw write, 1 stream, buffered"),
    ("raw_fsync", "  its fsync"),
    ("raw_total", "raw write + fsync (dd conv=fsync)"),
    ("raw_read", "raw read, 1 stream, buffered (cold)"),
    ("direct_total", "raw O_DIRECT write + fsync (device ceiling)"),
    ("direct_read", "raw O_DIRECT read, 1 stream"),
    ("first_touch", "first touch of fresh memory (every load pays it)"),
)


_OPTIONS = {"dir": "--dir", "size_bytes": "--size", "streams": "--streams",
            "stripe_bytes": "--stripe", "repeat": "--repeat", "checksum": "--checksum",
            "device": "--device"}
"""`ProfileConfig` field -> the option that sets it (its errors read ``profile.<field> ...``)."""
_FIELD = re.compile(r"profile\.(\w+)")


def _parse_streams(text: str) -> tuple[int, ...]:
    parts = [part.strip() for part in text.split(",")]
    if not all(parts) or not all(part.lstrip("-").isdigit() for part in parts):
        raise ConfigError(f"--streams must be comma separated integers such as 1,2,4,8, got "
                          f"{text!r}")
    return tuple(int(part) for part in parts)


def _option_error(exc: ConfigError, option: str | None = None) -> NoReturn:
    """A usage error (exit 2) whose message names the option at fault."""
    message = str(exc)
    match = _FIELD.match(message)
    if match and match.group(1) in _OPTIONS:
        message = _OPTIONS[match.group(1)] + message[match.end():]
    elif option is not None and not message.startswith(option):
        message = f"{option}: {message}"
    fail(message, 2)


def _parsed(option: str, parse: Callable[[str], _T], text: str) -> _T:
    try:
        return parse(text)
    except ConfigError as exc:
        _option_error(exc, option)


def _config(directory: Path, size: str, streams: str, stripe: str, repeat: int | None,
            checksum: str, device: str) -> ProfileConfig:
    """The options as a `ProfileConfig`; a usage error naming the option when one is bad."""
    try:
        return ProfileConfig(dir=directory, size_bytes=_parsed("--size", parse_size, size),
                             streams=_parsed("--streams", _parse_streams, streams),
                             stripe_bytes=_parsed("--stripe", parse_size, stripe),
                             repeat=repeat, checksum=checksum, device=device)
    except ConfigError as exc:
        _option_error(exc)


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on stderr (only on a terminal); yields callback(label, done, total)."""
    if not enabled or not stderr_is_tty():
        yield lambda label, done, total: None
        return
    with Progress(TextColumn("[bold]profiling[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task("", total=None)
        yield lambda label, done, total: bar.update(task, description=escape(label),
                                                    completed=done, total=total)


def _s(t: Timing | None) -> str:
    return "n/a" if t is None else f"{t.median_s:.3f}"


def _bw(t: Timing | None) -> str:
    gbps = None if t is None else t.gbps
    return "-" if gbps is None else f"{gbps:.2f}"


def _streams_table(result: ProfileResult) -> Table:
    best_save, best_load = result.best_save.streams, result.best_load.streams
    table = Table(title=f"seconds per stage, median of {result.config.repetitions}; GB/s = "
                  f"{result.nbytes / 1e9:.2f} GB / seconds", title_justify="left")
    columns = ("streams", "blocking", "serialize", "copy", "D2H", "checksum", "write",
               "write GB/s", "fsync", "save", "save GB/s", "read", "read GB/s", "verify",
               "load", "load GB/s")
    for name in columns:
        table.add_column(name, justify="right")
    for s in result.streams:
        marks = ("S" if s.streams == best_save else "") + ("L" if s.streams == best_load else "")
        files = f"{s.files} file" + ("s" if s.files != 1 else "")
        label = f"{s.streams}" + (f" ({files})" if s.files != s.streams else "")
        table.add_row(f"{label} {marks}".strip(), *_stage_cells(s),
                      style="bold" if marks else None)
    table.caption_justify = "left"
    table.caption = ("S: best save, L: best load. blocking = serialize + copy (D2H for a GPU "
                     "state); save and load are the engine end to end; the other stages were "
                     "timed one at a time")
    return table


def _stage_cells(s: StreamProfile) -> list[str]:
    return [_s(s.blocking), _s(s.serialize), _s(s.copy), _s(s.d2h), _s(s.checksum), _s(s.write),
            _bw(s.write), _s(s.fsync), _s(s.save), _bw(s.save), _s(s.read), _bw(s.read),
            _s(s.verify), _s(s.load), _bw(s.load)]


def _baselines_table(result: ProfileResult) -> Table:
    versus = {c.baseline: c for c in result.comparisons()}
    table = Table(title="baselines on the same bytes and directory", title_justify="left")
    for name, right in (("method", False), ("seconds", True), ("GB/s", True),
                        ("trainguard (best)", False)):
        table.add_column(name, justify="right" if right else "left")
    for key, label in _BASELINE_ROWS:
        timing = result.baselines.get(key)
        if timing is None:
            continue
        c = versus.get(key)
        what = "" if c is None else c.summary()
        if c is not None and key == "direct_total":
            what += f" ({c.speedup:.0%} of the device ceiling)"
        table.add_row(label, _s(timing), _bw(timing), what)
    return table


def _streams_word(n: int) -> str:
    return f"{n} stream" + ("s" if n != 1 else "")


def _where(result: ProfileResult) -> list[str]:
    lines = ["where the time goes (best configuration; stages timed one at a time):"]
    for b in result.breakdowns():
        parts = " · ".join(f"{name} {seconds:.3f} s ({share:.0%})"
                           for name, seconds, share in b.shares())
        note = f"stages sum to {b.stage_sum_s:.3f} s"
        if b.overlap_s > 0:
            note += ", more than end to end: the engine overlaps them"
        lines.append(f"  {b.operation}, {_streams_word(b.streams)}, {b.total_s:.3f} s end to "
                     f"end: {parts}; {note}")
    return lines


def _best_line(result: ProfileResult) -> str:
    save, load = result.best_save, result.best_load
    line = (f"best: {result.recommendation()}  # save {_bw(save.save)} GB/s, load "
            f"{_bw(save.load)} GB/s")
    if load.streams != save.streams:
        line += (f"; loads are fastest from files written with streams={load.streams} "
                 f"({_bw(load.load)} GB/s)")
    return line


def _print(result: ProfileResult) -> None:
    cfg = result.config
    out.print(escape(
        f"profiled {format_size(result.nbytes)} ({result.n_tensors} tensors on {result.device}) "
        f"in {cfg.dir} ({result.filesystem}); O_DIRECT {'yes' if result.direct_io else 'no'}; "
        f"stripe {format_size(cfg.stripe_bytes)}; checksum {cfg.checksum}; "
        f"{cfg.repetitions} repetition(s), medians; took {result.wall_s:.0f} s"))
    print_table(out, _streams_table(result))
    print_table(out, _baselines_table(result))
    for line in _where(result):
        out.print(escape(line))
    out.print(escape(_best_line(result)), style="bold")
    if not result.cold_reads:
        warn("the page cache could not be dropped before reads: read and load times may be "
             "warm")
    if not result.direct_io:
        warn("this filesystem refuses O_DIRECT: the engine's writes and reads go through the "
             "page cache")


def profile(
    directory: Annotated[Path, typer.Option(
        "--dir", help="Directory on the filesystem to profile; a scratch subdirectory is "
        "written there and removed.", show_default=False)],
    size: Annotated[str, typer.Option(
        help="Bytes of synthetic model state: 8GiB, 2GB, 512MiB, 100M or plain bytes.")
    ] = "2GiB",
    streams: Annotated[str, typer.Option(
        help="Stream counts to try (files written and read in parallel), comma separated.")
    ] = "1,2,4,8,16",
    stripe: Annotated[str, typer.Option(
        help="Stripe: chunk size dealt round-robin to the streams; a multiple of 4 KiB.")
    ] = "16MiB",
    repeat: Annotated[int | None, typer.Option(
        help="Repetitions of every method (medians are shown) [default: 3 up to 4 GiB, 2 up "
        "to 32 GiB, else 1].", min=1, max=100, show_default=False)] = None,
    checksum: Annotated[str, typer.Option(help="Data file checksum: crc32 or sha256.")
    ] = "crc32",
    device: Annotated[str, typer.Option(
        help="Where the state's tensors live: auto (CUDA when available), cpu or cuda.")
    ] = "auto",
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the measurements as one JSON document (no tables).")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress bar; print only the best configuration (or the "
        "JSON).")] = False,
) -> None:
    """Profile checkpoint saves and loads on one filesystem: time per stage and bandwidth per
    stream count, against torch.save / torch.load and raw writes of the same bytes.

    Stages: blocking (snapshot), serialization, copy or device-to-host, checksum, write,
    fsync, end-to-end save, cold read back, verify, end-to-end load. Needs --size x 1.1 of
    free space in --dir and about 3 x --size of free memory. See docs/ckpt-profile.md.
    """
    cfg = _config(directory, size, streams, stripe, repeat, checksum, device)
    measuring: list[str] = []  # the checks passed once the first method reports progress

    def progress_of(bar: Callable[[str, int, int], None]) -> Callable[[str, int, int], None]:
        def report(label: str, done: int, total: int) -> None:
            measuring.append(label)
            bar(label, done, total)
        return report

    try:
        with _progress(enabled=not quiet) as bar:
            result = run_profile(cfg, progress=progress_of(bar))
    except ConfigError as exc:  # --device cuda without CUDA, or no PyTorch
        if _FIELD.match(str(exc)):
            _option_error(exc)
        fail(str(exc), 2)
    except TrainguardError as exc:
        # Before measuring: --dir unusable, too small, or too little memory for --size (the
        # input, 2); while measuring: an I/O error on the filesystem (a failed profile, 1).
        fail(str(exc), 1 if measuring else 2)
    if json_out:
        typer.echo(json.dumps(result.to_json(), indent=2, allow_nan=False))
    elif quiet:
        out.print(escape(result.recommendation()))
    else:
        _print(result)
