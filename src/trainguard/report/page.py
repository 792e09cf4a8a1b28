"""The pieces every trainguard HTML page is made of: plotly (imported lazily, extra ``report``),
one self-contained document with plotly.js inlined, figure divs, key-value tables and a JSON
data island.

A page is :func:`html_page` around sections; a section is made of :func:`kv_table`,
:func:`data_table`, :func:`figure_div` and :func:`json_island` strings. Script errors are
collected into ``#tg-errors`` (hidden) for the headless check, and every figure's div is
``<div class='plot' data-figure=NAME>`` holding plotly's ``fig-NAME``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from trainguard.errors import ConfigError

ERROR_HOOK = """<script>
window.tgErrors = [];
function tgRecord(msg) {
  window.tgErrors.push(String(msg));
  var box = document.getElementById('tg-errors');
  if (box) { box.textContent = window.tgErrors.join('\\n'); }
}
window.addEventListener('error', function (e) { tgRecord(e.message); });
window.addEventListener('unhandledrejection', function (e) { tgRecord(e.reason); });
var tgConsoleError = console.error;
console.error = function () { tgRecord(Array.prototype.join.call(arguments, ' '));
  tgConsoleError.apply(console, arguments); };
</script>"""

STYLE = """<style>
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table.kv { border-collapse: collapse; } table.kv td { padding: 3px 12px 3px 0; }
table.kv td:first-child { color: #555; }
table.data { border-collapse: collapse; margin-top: 16px; }
table.data caption { text-align: left; font-weight: 600; padding-bottom: 4px; }
table.data th, table.data td { padding: 3px 10px; border-bottom: 1px solid #ddd; }
table.data th, table.data td.t { text-align: left; } table.data td { text-align: right; }
.plot { max-width: 1100px; }
#tg-errors { display: none; }
</style>"""


def plotly_go() -> Any:
    """``plotly.graph_objects``, or a ConfigError naming the extra to install."""
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ConfigError("the HTML report needs plotly: pip install 'trainguard[report]'") \
            from exc
    return go


def empty_figure(go: Any, title: str, why: str) -> Any:
    """A figure without data that says why (every figure draws, data or not)."""
    fig = go.Figure()
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def figure_div(fig: Any, name: str) -> str:
    """``fig`` as a div of the page (plotly.js comes once, from :func:`html_page`)."""
    fig.update_layout(height=max(420, fig.layout.height or 0), margin={"t": 60})
    div: str = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}",
                           config={"displaylogo": False})
    return f"<div class='plot' data-figure='{html.escape(name)}'>{div}</div>"


def kv_table(rows: Iterable[tuple[str, str]]) -> str:
    """Rows of ``name  value`` (escaped: data, never markup)."""
    body = "\n".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                     for k, v in rows)
    return f"<table class='kv'>\n{body}\n</table>"


def data_table(columns: Sequence[str], rows: Iterable[Sequence[str]], caption: str = "",
               text: int = 1) -> str:
    """A table with a header row; the first ``text`` columns are text (left-aligned), the rest
    numbers (right-aligned). Cells are escaped: data, never markup."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(f"<td class='t'>{html.escape(v)}</td>" if i < text
                                       else f"<td>{html.escape(v)}</td>"
                                       for i, v in enumerate(row)) + "</tr>"
                     for row in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table class='data'>{cap}<tr>{head}</tr>\n{body}\n</table>"


def json_island(element_id: str, data: object) -> str:
    """``data`` as JSON in a non-executed script element, for scripts and checks to read.

    A script element's text is not HTML-unescaped, so ``<``, ``>`` and ``&`` are written as
    JSON escapes (``\\u003c``...): the element's text is the JSON itself, and no ``</script>``
    inside a string can end the element early."""
    text = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026")
    return f"<script type='application/json' id='{html.escape(element_id)}'>{text}</script>"


def html_page(title: str, sections: Iterable[str]) -> str:
    """One self-contained HTML document (no network access needed to view it)."""
    plotly_go()
    from plotly.offline import get_plotlyjs

    head = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title>{STYLE}{ERROR_HOOK}<script>{get_plotlyjs()}</script></head><body>")
    return "\n".join([head, f"<h1>{html.escape(title)}</h1><pre id='tg-errors'></pre>",
                      *sections, "</body></html>"])


__all__ = ["ERROR_HOOK", "STYLE", "data_table", "empty_figure", "figure_div", "html_page",
           "json_island", "kv_table", "plotly_go"]
