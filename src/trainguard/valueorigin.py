"""Error messages that name where a bad value came from: the flag a person typed, or the key and
the file they wrote.

A config dataclass validates its fields knowing only their keys (``watch.prometheus``): it
raises :class:`InvalidValue`, which carries the key and the problem apart. The loader knows
where each value came from and rewords the error with :func:`named`:

    >>> exc = InvalidValue("watch.prometheus", "must be an http(s):// URL, got 'p:9090'")
    >>> str(exc)
    "watch.prometheus must be an http(s):// URL, got 'p:9090'"
    >>> str(named(exc, {"watch.prometheus": "--prometheus"}))
    "--prometheus must be an http(s):// URL, got 'p:9090'"
    >>> str(named(exc, {"watch.prometheus": in_file("watch.prometheus", "w.toml")}))
    "w.toml: watch.prometheus must be an http(s):// URL, got 'p:9090'"
"""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.errors import ConfigError

__all__ = ["InvalidValue", "in_file", "named"]


class InvalidValue(ConfigError):
    """A configuration value is invalid: `key` names it, `problem` says what is wrong
    (``"must be > 0"``); the message is ``"{key} {problem}"``."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key
        self.problem = problem


def in_file(key: str, path: object) -> str:
    """How a key written in a config file is named in a message."""
    return f"{path}: {key}"


def named(exc: InvalidValue, origins: Mapping[str, str]) -> ConfigError:
    """`exc` reworded to name where its value came from (``origins``: key -> a flag, or
    :func:`in_file`); unchanged when its key is not in `origins`."""
    origin = origins.get(exc.key)
    if origin is None:
        return exc
    return InvalidValue(origin, exc.problem)
