"""Cancelling a run: a flag set from a signal handler, and log classification it can abandon.

Classifying log text can take long on adversarial lines; a signal must never wait on a slow
regular expression. :meth:`CancelToken.cancel`, called from a signal handler while
:meth:`CancelToken.classify` runs on the main thread, raises into the classification, which then
returns its empty result.

    token = CancelToken()
    events = token.classify(lambda: scan(text), [])   # [] once the run is being cancelled
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class _Interrupted(Exception):
    """Raised into a running log classification by :meth:`CancelToken.cancel`."""


class CancelToken:
    """Whether the run is being cancelled; shared by the chain driver and its attempts."""

    def __init__(self) -> None:
        self.cancelled = False
        self._classifying = False

    def cancel(self) -> None:
        """Ask the run to stop (safe from a signal handler); abandons a running
        classification at once."""
        self.cancelled = True
        if self._classifying and threading.current_thread() is threading.main_thread():
            self._classifying = False
            raise _Interrupted

    def classify(self, scan: Callable[[], _T], empty: _T) -> _T:
        """``scan()`` (log classification), abandoned for ``empty`` when the run is cancelled
        before or during it."""
        if self.cancelled:
            return empty
        try:
            try:
                self._classifying = True
                return scan()
            finally:
                self._classifying = False
        except _Interrupted:
            log.info("log classification abandoned: the run is being cancelled")
            return empty


__all__ = ["CancelToken"]
