"""The modules a rank had loaded by its first step: the filter, the file round trip, the key a
rank computes (the launcher's, also when the script changed start-up variables or runs in a
standby), the SDK's write at the first step, and a standby importing the list."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from trainguard.train.env import TrainEnv
from trainguard.train.session import Session
from trainguard.warm.loaded import (
    names_path,
    process_key,
    read_names,
    script_dirs,
    select_names,
    write_names,
)
from trainguard.warm.pool import claim, parse_command, ready_standbys, start_standby
from trainguard.warm.protocol import Assignment


def _mod(name: str, file: str | None = None, path: list[str] | None = None) -> ModuleType:
    m = ModuleType(name)
    if file is not None:
        m.__file__ = file
    if path is not None:
        m.__path__ = path
    return m


def test_filter_keeps_library_modules_in_order_and_leaves_the_rest() -> None:
    lib, site, script = "/py/lib/python3.11/", "/py/lib/python3.11/site-packages/", "/job/"
    modules: dict[str, ModuleType | None] = {
        "sys": _mod("sys"),  # built-in: no file
        "json": _mod("json", lib + "json/__init__.py"),
        "__main__": _mod("__main__", lib + "runpy.py"),
        "torch._dynamo": _mod("torch._dynamo", site + "torch/_dynamo/__init__.py"),
        "helpers": _mod("helpers", script + "helpers.py"),  # the script's own module
        "vendored": _mod("vendored", site + "job/vendored.py"),
        "editable": _mod("editable", "/home/me/src/editable/__init__.py"),
        "relative": _mod("relative", "lib/python3.11/x.py"),
        "failed": None,  # an import that failed
        "nspkg": _mod("nspkg", path=[site + "nspkg"]),
        "trainguard.warm.standby": _mod("trainguard.warm.standby",
                                        site + "trainguard/warm/standby.py"),
        "colorsys": _mod("colorsys", lib + "colorsys.py"),
    }
    got = select_names(modules, [lib, site], [script, site + "job/"])
    assert got == ["json", "torch._dynamo", "nspkg", "colorsys"]
    assert select_names(modules, [site], []) == ["torch._dynamo", "vendored", "nspkg"]


def test_script_dirs() -> None:
    assert script_dirs(_mod("__main__")) == []
    dirs = script_dirs(_mod("__main__", "/nonexistent/job/train.py"))
    assert dirs == ["/nonexistent/job/"]


def test_names_round_trip_is_atomic_and_skips_junk(tmp_path: Path) -> None:
    path = names_path(tmp_path, "abc")
    assert read_names(path) == []
    names = ["json", "torch._dynamo", "xml.dom.minidom"]
    write_names(path, names)
    assert read_names(path) == names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc.imports"]  # no temp left
    path.write_text("json\n\nnot a name\n../etc\nos.path\n1bad\na/b\n_sysconfigdata__x-gnu\n")
    assert read_names(path) == ["json", "os.path", "_sysconfigdata__x-gnu"]


KEY_SCRIPT = """import os, sys
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # a start-up variable set by the script
os.environ["TORCH_SOMETHING"] = "later"
sys.path.insert(0, {src!r})
from trainguard.warm.loaded import process_key
print("KEY", process_key(), flush=True)
"""


class Standbys:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.warm = root / "warm"
        self.warm.mkdir(mode=0o700)
        self.lease = root / "lease"
        self.lease.touch()
        self.pids: list[int] = []

    def start(self, cmd_key: str, *args: object, **kw: object) -> int:
        pid = start_standby(*args, torch=False, check_s=0.1, **kw)  # type: ignore[misc,arg-type]
        self.pids.append(pid)
        deadline = time.monotonic() + 30
        while not any(p.name.split(".")[1] == str(pid)
                      for p in ready_standbys(self.warm, cmd_key)):
            assert time.monotonic() < deadline, (self.warm / f"{cmd_key}.log").read_text()
            time.sleep(0.02)
        return pid


@pytest.fixture
def sb(tmp_path: Path) -> Iterator[Standbys]:
    s = Standbys(tmp_path)
    yield s
    for pid in s.pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _src() -> str:
    import trainguard
    return str(Path(trainguard.__file__).parents[1])


def test_rank_key_is_the_launchers_cold_and_in_a_standby(sb: Standbys) -> None:
    script = sb.root / "job" / "k.py"
    script.parent.mkdir()
    script.write_text(KEY_SCRIPT.format(src=_src()))
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    cmd = parse_command((sys.executable, "job/k.py", "--x"), sys.executable, sb.root)
    assert cmd is not None
    cold = subprocess.run([sys.executable, "job/k.py", "--x"], env=env, cwd=sb.root,
                          capture_output=True, text=True, timeout=60, check=True)
    assert cold.stdout.split()[-1] == cmd.key(env)
    sb.start(cmd.key(env), cmd, env, sb.warm, sb.lease)
    out = sb.root / "warm.out"
    proc = claim(cmd, env, sb.warm, Assignment(cmd.argv, env, str(sb.root), str(out)))
    assert proc is not None
    sb.pids.append(proc.pid)
    assert proc.wait(30) == 0, out.read_text()
    assert out.read_text().split()[-1] == cmd.key(env)


@pytest.fixture
def as_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as ``python script.py``, as under pytest's own console script: a
    pytest-xdist worker's ``__main__`` is neither a script nor a module (no key)."""
    script = tmp_path / "bin" / "main.py"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.setitem(sys.modules, "__main__", _mod("__main__", str(script)))


@pytest.mark.usefixtures("as_script")
def test_first_step_of_local_rank_0_writes_the_list_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = process_key()
    assert key is not None
    monkeypatch.setenv("TRAINGUARD_WARM_DIR", str(tmp_path))
    path = names_path(tmp_path, key)
    other = Session(TrainEnv(local_rank=1), clock=lambda: 1.0)
    other.step(0, loss=1.0)
    assert not path.exists()  # one writer per host
    s = Session(TrainEnv(local_rank=0), clock=lambda: 1.0)
    t0 = time.perf_counter()
    s.step(0, loss=1.0)
    assert time.perf_counter() - t0 < 0.5  # generous for a loaded 2-core machine; ~5 ms here
    names = read_names(path)
    assert "json" in names and "_pytest" in names and "__main__" not in names
    assert not any(n.startswith("trainguard") for n in names)  # a checkout, not a library
    path.unlink()
    s.step(1, loss=1.0)
    assert not path.exists()  # at most once per process


def test_a_failed_write_never_fails_the_rank(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_WARM_DIR", str(tmp_path / "missing" / "warm"))
    s = Session(TrainEnv(), clock=lambda: 1.0)
    s.step(0, loss=1.0)  # no exception
    assert not (tmp_path / "missing").exists()


LAZY = """import sys
print("preloaded", "colorsys" in sys.modules, "wave" in sys.modules, flush=True)
"""


def test_standby_imports_the_list_before_ready(sb: Standbys) -> None:
    script = sb.root / "lazy.py"
    script.write_text(LAZY)
    env = dict(os.environ)
    cmd = parse_command((sys.executable, str(script)), sys.executable, sb.root)
    assert cmd is not None
    key = cmd.key(env)
    runs = []
    for listed in (False, True):
        if listed:
            write_names(names_path(sb.warm, key), ["colorsys", "no_such_module_xyz"])
        sb.start(key, cmd, env, sb.warm, sb.lease)
        out = sb.root / f"out{listed}.log"
        proc = claim(cmd, env, sb.warm, Assignment(cmd.argv, env, str(sb.root), str(out)))
        assert proc is not None
        sb.pids.append(proc.pid)
        assert proc.wait(30) == 0
        runs.append(out.read_text().split())
    assert runs == [["preloaded", "False", "False"], ["preloaded", "True", "False"]]
    log = (sb.warm / f"{key}.log").read_text()
    assert "import no_such_module_xyz (loaded by an earlier rank) failed" in log
    assert "imported 1 of 2 modules" in log


def test_a_standby_started_before_the_list_imports_it_when_it_appears(sb: Standbys) -> None:
    """The first attempt's standbys start before its ranks reach a step (no list yet): they
    import the list once it is written, and are ready again after."""
    script = sb.root / "lazy.py"
    script.write_text(LAZY)
    env = dict(os.environ)
    cmd = parse_command((sys.executable, str(script)), sys.executable, sb.root)
    assert cmd is not None
    key = cmd.key(env)
    pid = sb.start(key, cmd, env, sb.warm, sb.lease)
    write_names(names_path(sb.warm, key), ["colorsys"])
    log = sb.warm / f"{key}.log"
    deadline = time.monotonic() + 30
    while "listed after the start" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    while not any(p.name.split(".")[1] == str(pid) for p in ready_standbys(sb.warm, key)):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    out = sb.root / "out.log"
    proc = claim(cmd, env, sb.warm, Assignment(cmd.argv, env, str(sb.root), str(out)))
    assert proc is not None and proc.pid != pid
    sb.pids.append(proc.pid)
    assert proc.wait(30) == 0
    assert out.read_text().split() == ["preloaded", "True", "False"]


@pytest.mark.usefixtures("as_script")
def test_a_rank_without_the_sdk_records_what_it_has_loaded_when_it_grew(
        tmp_path: Path) -> None:
    """A rank run in a standby (no SDK to write the list at its first step) records its
    modules from a thread, pausing as told; a list is replaced only by a longer one."""
    from trainguard.warm.loaded import record_grown, record_later

    key = process_key()
    assert key is not None
    path = names_path(tmp_path, key)
    pauses: list[float] = []
    record_later(tmp_path, delays=(5.0, 30.0), sleep=pauses.append).join(10)
    assert pauses == [5.0, 30.0]
    names = read_names(path)
    assert "json" in names and "__main__" not in names
    assert not record_grown(tmp_path)  # nothing new loaded: left as it is
    write_names(path, ["json"])
    assert record_grown(tmp_path) and len(read_names(path)) == len(names)
    assert not record_grown(tmp_path / "missing-dir")  # never raises


def test_a_standby_imports_the_heavy_lazy_imports_of_its_packages() -> None:
    from trainguard.warm.imports import LAZY_IMPORTS, with_lazy

    assert with_lazy(["torch.distributed", "numpy"]) == (
        "torch.distributed", "numpy", *LAZY_IMPORTS["torch"])
    assert with_lazy(["a.b", "c"], {"a": ("a.lazy",)}) == ("a.b", "c", "a.lazy")
    assert with_lazy([]) == ()
