"""Fresh flight-recorder dumps from real gloo ranks (tests/data/flight/make_dumps.py: subprocesses
on 127.0.0.1, each waited for with a deadline and killed by PID past it), read back by
trainguard: the ranks that entered the collective the last rank never reached are inside it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from trainguard.trace.flight import read_dumps
from trainguard.trace.model import WORLD

pytestmark = pytest.mark.integration

MAKE_DUMPS = Path(__file__).resolve().parents[1] / "data" / "flight" / "make_dumps.py"


def load_make_dumps() -> ModuleType:
    pytest.importorskip("torch.distributed")
    spec = importlib.util.spec_from_file_location("make_dumps", MAKE_DUMPS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gloo_hang_dumps_show_the_rank_that_never_entered(tmp_path: Path) -> None:
    load_make_dumps().run_case("hang", tmp_path, timeout_s=90.0)
    for kind in ("hang", "hang_json"):
        dumps = read_dumps(tmp_path / kind)
        assert [d.rank for d in dumps] == [0, 1, 2]
        states = [d.rank_state().groups[WORLD] for d in dumps]
        assert [(s.entered_seq, s.completed_seq, s.inside) for s in states] == [
            (6, 5, True), (6, 5, True), (5, 5, False)]
        assert [s.last.op for s in states if s.last is not None] == [
            "all_reduce", "all_reduce", "broadcast"]
        assert all(e.profiling_name.startswith("gloo:") for d in dumps for e in d.entries)
