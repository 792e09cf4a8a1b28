"""Warm standby interpreters: a rank starts in a process that already imported torch and the
script's top-level imports (docs/design/recovery-in-seconds.md, "Warm standby interpreters").

- :mod:`~trainguard.warm.protocol`: the start-up environment rule, the key, the messages;
- :mod:`~trainguard.warm.imports`: the script's top-level imports (ast, nothing executed);
- :mod:`~trainguard.warm.pool`: start, find and claim standbys in a host's warm directory;
- :mod:`~trainguard.warm.standby`: the standby process itself (``python standby.py ...``).
"""

from __future__ import annotations

from trainguard.warm.imports import top_level_imports
from trainguard.warm.pool import WarmCommand, WarmProc, claim, parse_command, start_standby
from trainguard.warm.protocol import Assignment, standby_key, startup_env

__all__ = ["Assignment", "WarmCommand", "WarmProc", "claim", "parse_command", "standby_key",
           "start_standby", "startup_env", "top_level_imports"]
