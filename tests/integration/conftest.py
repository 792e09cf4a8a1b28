"""Real servers for integration tests.

``postgres_url`` starts a private PostgreSQL (Debian's ``postgresql`` package; install it with
``scripts/sysdeps.sh``) on a loopback port and a temporary socket directory, once per test session.
``slurm_cluster`` starts a private Slurm cluster (controller + 4 virtual nodes, slurm_cluster.py).
Without the server binaries the tests skip, except under ``CI=true`` where they fail so that CI
cannot pass without having run them.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from ports import free_port
from slurm_cluster import SlurmCluster, SlurmClusterError, missing_programs

_PG_USER = "postgres"  # OS user to run the server as when tests run as root; also the DB superuser


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: integration servers are required)", pytrace=False)
    pytest.skip(reason)


def _find_pg_bindir() -> Path | None:
    """The newest Debian PostgreSQL bin dir, else wherever initdb is on PATH."""

    def major(path: str) -> float:
        try:
            return float(Path(path).parts[-3])
        except ValueError:
            return 0.0

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=major, reverse=True)
    on_path = shutil.which("initdb")
    for initdb in [*candidates, *([on_path] if on_path else [])]:
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").is_file() and os.access(bindir / "pg_ctl", os.X_OK):
            return bindir
    return None


@dataclass(frozen=True, slots=True)
class PostgresServer:
    """A running throwaway PostgreSQL server."""

    host: str
    port: int
    user: str

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        dsn = f"host={self.host} port={self.port} user={self.user} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _failed(what: str, proc: subprocess.CompletedProcess[str], log: Path) -> NoReturn:
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    output = f"{proc.stdout}{proc.stderr}{tail}"
    pytest.fail(f"{what} failed ({proc.returncode}):\n{output}", pytrace=False)


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """Start a private PostgreSQL on 127.0.0.1:<free port>; stop it (by PID) at the end."""
    bindir = _find_pg_bindir()
    if bindir is None:
        _unavailable(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/sysdeps.sh"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'trainguard[postgres]'")

    as_user: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        with contextlib.suppress(KeyError):
            owner = pwd.getpwnam(_PG_USER)
        if runuser is None or owner is None:
            _unavailable(f"running as root needs runuser and an OS user {_PG_USER!r} for initdb")
        as_user = [runuser, "-u", _PG_USER, "--"]

    # Not pytest's tmp_path: its parents are mode 0700 for root, so the postgres user could not
    # reach the data directory.
    base = Path(tempfile.mkdtemp(prefix="trainguard-pg-"))
    data, sockdir, log = base / "data", base / "sock", base / "server.log"
    sockdir.mkdir()
    if owner is not None:
        for path in (base, sockdir):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    initdb = [*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", _PG_USER]
    pg_ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "60"]
    try:
        proc = _run([*initdb, "-E", "UTF8", "--locale=C", "--no-sync"])
        if proc.returncode != 0:
            _failed("initdb", proc, log)
        for attempt in range(3):  # a port taken between probing and binding is worth a retry
            port = free_port()
            # A throwaway server: durability is irrelevant, and fsync is slow.
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -k {sockdir} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            proc = _run([*pg_ctl, "-l", str(log), "-o", options, "start"])
            if proc.returncode == 0:
                break
            if attempt == 2:
                _failed("pg_ctl start", proc, log)
        yield PostgresServer(host="127.0.0.1", port=port, user=_PG_USER)
    finally:
        pid = _postmaster_pid(data)
        if pid is not None:
            _run([*pg_ctl, "-m", "fast", "stop"])
            _kill_if_alive(pid)
        shutil.rmtree(base, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pid now belongs to someone else's process
        return False
    try:  # an exited server nobody has reaped yet is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _kill_if_alive(pid: int) -> None:
    """Last resort after ``pg_ctl stop``: give the postmaster 5 s, then SIGKILL it."""
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """``postgresql://postgres@127.0.0.1:<port>/trainguard_test`` on the private server."""
    return postgres_server.create_database("trainguard_test")


_fresh_db_numbers = itertools.count()


@pytest.fixture
def fresh_postgres_url(postgres_server: PostgresServer) -> str:
    """A new, empty database on the private server for each test."""
    return postgres_server.create_database(f"trainguard_t{next(_fresh_db_numbers)}")


# -- Slurm ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A private Slurm 22.05 cluster (slurmctld + 4 slurmd + munged; see slurm_cluster.py),
    started once per test session and stopped (by PID) at the end.

    Tests that drain nodes must resume them. Without the packages (scripts/sysdeps.sh) or root
    the tests skip, except under ``CI=true`` where they fail.
    """
    missing = missing_programs()
    if missing:
        _unavailable(f"Slurm test cluster needs {', '.join(missing)}: run scripts/sysdeps.sh")
    if os.geteuid() != 0:
        _unavailable("Slurm test cluster needs root (slurmd in a private mount namespace)")
    cluster = SlurmCluster(nodes=4, cpus=4)
    try:
        cluster.start()
    except SlurmClusterError as exc:
        pytest.fail(f"Slurm test cluster did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
