"""Pure parts of warm standbys: the script's imports (ast), the start-up environment rule,
the standby key, the messages and the pre-warm targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.warm.imports import top_level_imports
from trainguard.warm.launcher import plan_targets
from trainguard.warm.pool import parse_command
from trainguard.warm.protocol import (
    Assignment,
    ProtocolError,
    compatible,
    decode,
    encode,
    parse_assignment,
    standby_key,
    startup_env,
)

SOURCE = '''
from __future__ import annotations
import os, torch.distributed as dist
from numpy import linalg
from . import sibling
from .pkg import thing
try:
    import yaml
except ImportError:
    yaml = None
if True:
    from collections import abc
def f():
    import json
class C:
    import csv
import os
'''


def test_top_level_imports_in_order_without_functions_relative_or_future() -> None:
    assert top_level_imports(SOURCE) == ("os", "torch.distributed", "numpy", "yaml",
                                         "collections")


def test_unparsable_script_has_no_imports() -> None:
    assert top_level_imports("def (:\n") == ()


@pytest.mark.parametrize(("name", "startup"), [
    ("PYTHONPATH", True), ("LD_PRELOAD", True), ("OMP_NUM_THREADS", True),
    ("MKL_NUM_THREADS", True), ("CUDA_VISIBLE_DEVICES", True), ("HOME", True),
    ("LC_ALL", True), ("TORCH_CUDA_ARCH_LIST", True), ("PYTORCH_CUDA_ALLOC_CONF", True),
    ("RANK", False), ("MASTER_PORT", False), ("TRAINGUARD_ATTEMPT", False),
    ("TORCHELASTIC_RESTART_COUNT", False), ("TORCHELASTIC_RUN_ID", False), ("USER", False),
])
def test_startup_env_rule(name: str, startup: bool) -> None:
    assert (name in startup_env({name: "x", "OTHER_THING": "y"})) is startup


def test_compatible_needs_equal_startup_variables_only() -> None:
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "RANK": "0"}
    assert compatible(base, {**base, "RANK": "3", "MASTER_PORT": "1234"})
    assert not compatible(base, {**base, "OMP_NUM_THREADS": "4"})
    assert not compatible(base, {**base, "LD_PRELOAD": "/x.so"})  # added
    assert not compatible({**base, "PYTHONHASHSEED": "0"}, base)  # removed


def test_key_changes_with_python_script_mtime_and_startup_env() -> None:
    env = {"OMP_NUM_THREADS": "1", "RANK": "0"}
    k = standby_key("/py", "/s.py", 1, env)
    assert k == standby_key("/py", "/s.py", 1, {**env, "RANK": "5"})
    others = {standby_key("/py2", "/s.py", 1, env), standby_key("/py", "/t.py", 1, env),
              standby_key("/py", "/s.py", 2, env),
              standby_key("/py", "/s.py", 1, {**env, "OMP_NUM_THREADS": "2"})}
    assert k not in others and len(others) == 4


def test_assignment_round_trip_and_errors() -> None:
    job = Assignment(("s.py", "a"), {"A": "1"}, "/tmp", "/tmp/o.log")
    assert parse_assignment(decode(encode(job.to_json()))) == job
    with pytest.raises(ProtocolError, match="argv"):
        parse_assignment({**job.to_json(), "argv": []})
    with pytest.raises(ProtocolError, match="env"):
        parse_assignment({**job.to_json(), "env": {"A": 1}})
    with pytest.raises(ProtocolError, match="output"):
        parse_assignment({**job.to_json(), "output": ""})
    with pytest.raises(ProtocolError, match="JSON"):
        decode(b"{nope")
    with pytest.raises(ProtocolError, match="'t'"):
        decode(b"[1]")


def test_parse_command(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("pass\n")
    cmd = parse_command(("python3", "s.py", "--x"), "/usr/bin/python3", tmp_path)
    assert cmd is not None and cmd.argv == (str(tmp_path / "s.py"), "--x") and cmd.mtime_ns
    mod = parse_command(("python", "-m", "pkg.main", "a"), "/usr/bin/python", tmp_path)
    assert mod is not None and mod.argv == ("-m", "pkg.main", "a")
    assert parse_command(("python", "-u", "s.py"), "/usr/bin/python", tmp_path) is None
    assert parse_command(("bash", "s.py"), "/bin/bash", tmp_path) is None
    assert parse_command(("python", "missing.py"), "/usr/bin/python", tmp_path) is None
    assert parse_command(("python", "-m"), "/usr/bin/python", tmp_path) is None
    # A relative interpreter (make demo's .venv/bin/python) is made absolute against the
    # ranks' working directory: the standby starts elsewhere (in its warm directory).
    rel = parse_command((".venv/bin/python", "s.py"), ".venv/bin/python", tmp_path)
    assert rel is not None and rel.python == str(tmp_path / ".venv" / "bin" / "python")


def test_plan_targets_one_per_slot_of_nodes_and_spares() -> None:
    def env(node: str, local: int) -> dict[str, str]:
        return {"TRAINGUARD_WARM_DIR": f"/h/{node}/warm", "LOCAL_RANK": str(local)}
    ranks = [(n, lr, env(n, lr)) for n in ("a", "b") for lr in (0, 1)]
    targets = plan_targets(("a", "b"), ("s",), {"s": "/h/s"}, ranks)
    assert [(str(t.warm_dir), t.env["LOCAL_RANK"]) for t in targets] == [
        ("/h/a/warm", "0"), ("/h/a/warm", "1"), ("/h/b/warm", "0"), ("/h/b/warm", "1"),
        ("/h/s/warm", "0"), ("/h/s/warm", "1")]
    assert {str(t.lease) for t in targets} == {"/h/a/lease", "/h/b/lease", "/h/s/lease"}
    # No host dir known for a spare and no rank there: nothing to pre-warm on it.
    assert len(plan_targets(("a", "b"), ("s",), {}, ranks)) == 4
    # Warm starts off (no TRAINGUARD_WARM_DIR): nothing at all.
    assert plan_targets(("a",), (), {"a": "/h/a"}, [("a", 0, {})]) == []
