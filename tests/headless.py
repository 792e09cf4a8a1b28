"""Headless Chromium for the HTML render tests: the browser, or a skip (a failure under CI,
where scripts/sysdeps.sh installs it)."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (scripts/sysdeps.sh)")
    pytest.skip("chromium is not installed (scripts/sysdeps.sh)")
