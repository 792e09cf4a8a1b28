"""The chunked scan reads the same lines whatever the chunk size (issue #30's faster scan loop).

The scan loop counts line ends once per chunk, on its way to the prefilter's hits, and joins the
carried-over tail with the pieces just read. Line numbers, ``lines_read`` and the events must not
depend on where the chunks are cut, on NUL padding inside a piece, or on a last line without a
line end.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, load_rules, scan_paths, scanner
from trainguard.evidence.events import FailureEvent
from trainguard.evidence.scanner import ScanStats

FAILURES = [
    "May  1 10:00:{s:02d} node{n} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={n}, name=python, "
    "GPU has fallen off the bus.",
    "[rank{n}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "May  1 10:00:{s:02d} node{n} kernel: nfs: server storage01 not responding, still trying",
    "[rank{n}]: OSError: [Errno 28] No space left on device",
    "node{n}: fatal: the job died for no reason anyone wrote down",
]
BENIGN = [
    "[rank{n}]: 2024-05-01 10:00:{s:02d},123 INFO train.py:211 step {n} | loss 2.{s:02d}",
    "node{n}:1234:1240 [0] NCCL INFO Channel {s:02d}/0 : 0[0] -> 1[0] via P2P/CUMEM",
    "May  1 10:00:{s:02d} node{n} systemd[1]: Started Session {n} of user slurm.",
]


def _lines(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        pool = FAILURES if rng.random() < 0.05 else BENIGN
        out.append(rng.choice(pool).format(n=rng.randint(1, 64), s=rng.randint(0, 59)))
    return out


def _scan(path: Path) -> tuple[list[FailureEvent], ScanStats]:
    return scan_paths([str(path)], load_rules(), ScanOptions(suspicious_lines=True,
                                                             default_year=2024))


@pytest.mark.parametrize("chunk", [4096, 6000, 1 << 20])
@pytest.mark.parametrize("final_newline", [True, False])
def test_line_numbers_and_line_count_do_not_depend_on_the_chunk_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
        final_newline: bool) -> None:
    lines = _lines(seed=chunk, count=3000)
    # NUL padding (crash-time) inside some lines: dropped, the lines are kept.
    for i in range(5, len(lines), 400):
        lines[i] = lines[i][:10] + "\x00" * 3000 + lines[i][10:]
    path = tmp_path / "mixed.log"
    path.write_bytes(("\n".join(lines) + ("\n" if final_newline else "")).encode())
    clean = [line.replace("\x00", "") for line in lines]

    whole, whole_stats = _scan(path)
    monkeypatch.setattr(scanner, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(scanner, "LOOKAHEAD_BYTES", min(1024, chunk // 4))
    events, stats = _scan(path)

    assert stats.lines_read == whole_stats.lines_read == len(lines)
    assert events == whole
    assert len(events) > 100
    for ev in events:
        ref = ev.evidence[0]
        assert clean[ref.line_no - 1] == ref.text, ref
