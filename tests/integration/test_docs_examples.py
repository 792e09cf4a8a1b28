"""Run every shell example of the docs that is not marked as needing more than this machine.

Each page's runnable blocks run in order (later blocks may use what earlier ones wrote) as
``bash -e -o pipefail`` scripts in a fresh directory holding a copy of ``examples/`` and
``tests/data/``, with the virtual environment's ``bin`` first on PATH and ``.venv`` linked to it
(so ``trainguard``, ``python`` and ``.venv/bin/trainguard`` are the installed ones). Each block
must exit with the status its mark documents (``<!-- example: exit=1 -->``; 0 by default). The
marks themselves are checked by tests/unit/test_docs_examples_marks.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from docs_examples import REPO, Example, all_examples

pytestmark = pytest.mark.integration

BLOCK_TIMEOUT_S = 300
OUTPUT_TAIL = 3000


def _pages() -> dict[str, list[Example]]:
    pages: dict[str, list[Example]] = defaultdict(list)
    for example in all_examples():
        if example.runnable:
            pages[str(example.path.relative_to(REPO))].append(example)
    return dict(pages)


PAGES = _pages()


def _workdir(root: Path) -> Path:
    work = root / "work"
    shutil.copytree(REPO / "examples", work / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "tests" / "data", work / "tests" / "data")
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return work


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    tmp = root / "tmp"
    tmp.mkdir()
    env["TMPDIR"] = str(tmp)  # what the commands leave in $TMPDIR goes with the test's tmp_path
    env.pop("TRAINGUARD_DB", None)  # the docs' default store: ./trainguard.db
    env["COLUMNS"] = "120"
    return env


def _run(example: Example, cwd: Path, env: dict[str, str]) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", example.script()], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=BLOCK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return -1, out + f"\n[timed out after {BLOCK_TIMEOUT_S} s]", time.monotonic() - started
    return done.returncode, done.stdout.decode(errors="replace"), time.monotonic() - started


def test_some_examples_are_run() -> None:
    assert PAGES, "no runnable shell example in the docs"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_examples(page: str, tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    env = _env(tmp_path)
    failures: list[str] = []
    for example in PAGES[page]:
        status, output, seconds = _run(example, work, env)
        print(f"{example.where}: exit {status} in {seconds:.1f} s")
        if status != example.expected_exit:
            failures.append(
                f"{example.where}: exit status {status}, documented {example.expected_exit}\n"
                f"--- script ---\n{example.script()}--- output (tail) ---\n"
                f"{output[-OUTPUT_TAIL:]}")
    assert not failures, "\n\n".join(failures)
