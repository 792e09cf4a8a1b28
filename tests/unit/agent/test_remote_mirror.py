"""The controller keeps each rank file open across agents' messages (issue 26, section 5:
opening, appending and closing per message cost a third of its CPU)."""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest
from test_lying_agent import attempt

from trainguard.agent.hub import Inbound


def test_the_controller_opens_each_rank_file_once_for_many_messages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote, hub = attempt(tmp_path)
    opened: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def counting_builtin(file: object, *args: object, **kwargs: object) -> object:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    def counting_os(path: object, flags: int, mode: int = 0o777) -> int:
        opened.append(str(path))
        return real_os_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "open", counting_builtin)
    monkeypatch.setattr(os, "open", counting_os)
    for i in range(200):
        hub.queue.append(Inbound("a", 0, {"t": "out", "rank": 0, "data": f"{i}\n".encode()},
                                 0.0))
        hub.queue.append(Inbound("a", 0, {"t": "sdk", "rank": 0, "data": b"{}\n"}, 0.0))
    remote.poll()
    assert sorted(Path(p).name for p in opened) == ["r0.events", "r0.log"]
    assert (tmp_path / "r0.log").read_text().splitlines() == [str(i) for i in range(200)]
    remote.close()
