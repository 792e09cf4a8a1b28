"""How an agent takes the run's secret (:mod:`trainguard.agent.secret`): from the pipe its
re-exec left, closing it; or, without a re-exec, out of ``os.environ``. The whole path (a real
agent's ``/proc/<pid>/environ``) is tests/integration/test_agent_secret.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainguard.agent.secret import SECRET_ENV, SECRET_FD_ENV, SecretError, take_secret


def test_the_secret_comes_from_the_pipe_and_the_pipe_is_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"s3cret")
    os.close(write_end)
    monkeypatch.setenv(SECRET_FD_ENV, str(read_end))
    assert take_secret() == "s3cret"
    assert SECRET_FD_ENV not in os.environ
    with pytest.raises(OSError):
        os.fstat(read_end)


def test_without_reexec_the_variable_leaves_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "abc")
    assert take_secret(reexec=False) == "abc"
    assert SECRET_ENV not in os.environ
    assert take_secret(reexec=False) is None


def test_a_bad_descriptor_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_FD_ENV, "x")
    with pytest.raises(SecretError, match="descriptor"):
        take_secret()


def test_the_reexec_keeps_the_pid_and_drops_the_variable() -> None:
    code = ("import os, sys\n"
            "from trainguard.agent.secret import take_secret\n"
            "print(os.getpid(), take_secret(),"
            " b'TRAINGUARD_AGENT_SECRET=' in open('/proc/self/environ', 'rb').read())\n")
    env = {**os.environ, SECRET_ENV: "xyz"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            text=True)
    out, _ = proc.communicate(timeout=60)
    pid, secret, leaked = out.split()
    assert (int(pid), secret, leaked) == (proc.pid, "xyz", "False")
