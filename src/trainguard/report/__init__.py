"""The operator's report: HTML (plotly, self-contained) over :mod:`trainguard.analytics`."""

from __future__ import annotations

from trainguard.report.html import FIGURES, render_html
from trainguard.report.summary import summary_rows

__all__ = ["FIGURES", "render_html", "summary_rows"]
