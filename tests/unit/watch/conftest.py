"""Shared fixtures of the watch tests."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="module")
def promtool() -> str:
    """The real promtool (Debian `prometheus`); a CI run without it fails instead of skipping."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool not found: run scripts/sysdeps.sh")
        pytest.skip("promtool not found: run scripts/sysdeps.sh")
    return path
