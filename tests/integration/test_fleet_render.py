"""The `trainguard fleet --html` page renders in headless Chromium: every chart (fleet figures
and planning) draws, with no script error, on the docs' synthetic example history."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from headless import chromium

pytest.importorskip("plotly", reason="the HTML page needs plotly (trainguard[report])")
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TG = [sys.executable, "-m", "trainguard.cli.main"]


def test_fleet_page_draws_every_chart(tmp_path: Path) -> None:
    db, html = tmp_path / "fleet.db", tmp_path / "fleet.html"
    for argv in (["history", "import", str(REPO / "examples/fleet/synthetic-fault-trace.json"),
                  "--fleet-size", "300", "--time-unit", "days", "--window-end", "365",
                  "--db", str(db)],
                 ["fleet", "--db", str(db), "--html", str(html), "--replays", "2",
                  "--job-sizes", "8,64"]):
        done = subprocess.run([*TG, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    text = html.read_text()
    assert "<script src=" not in text and "<link " not in text  # self-contained
    dom = subprocess.run(
        [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
         "--virtual-time-budget=15000", "--dump-dom", html.as_uri()],
        capture_output=True, text=True, timeout=120).stdout
    names = [a or b for a, b in re.findall(r"data-figure='([a-z-]+)'|data-figure=\"([a-z-]+)\"",
                                          dom)]
    assert len(names) >= 7 and {"planning-curve", "planning-compare"} <= set(names), names
    for name in names:
        start = dom.index(f"id=\"fig-{name}\"")
        assert "main-svg" in dom[start:start + 20000], f"{name} did not draw"
    errors = re.search(r'<pre id="tg-errors">(.*?)</pre>', dom, flags=re.S)
    assert errors is not None and errors.group(1).strip() == ""
