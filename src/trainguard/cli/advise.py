"""`trainguard advise`: advice from the store's history (the ETTR model of
:mod:`trainguard.analytics.model`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from trainguard.analytics.failures import failure_stats
from trainguard.analytics.model import (
    MeasuredInputs,
    Measurement,
    ModelInputs,
    advise,
    measured_inputs,
)
from trainguard.analytics.report import json_safe
from trainguard.analytics.runs import load_runs
from trainguard.cli.console import err, fail, out
from trainguard.cli.helptext import reflowed_doc
from trainguard.cli.options import duration_option
from trainguard.cli.storeopen import open_store
from trainguard.durations import format_duration as _duration
from trainguard.errors import TrainguardError
from trainguard.store import Store

app = typer.Typer(help="Advice from the store's history.", no_args_is_help=True)

DbOpt = Annotated[str | None, typer.Option(
    "--db", help="Event store: SQLite path or postgresql:// URL "
    "(default $TRAINGUARD_DB, else ./trainguard.db).")]

_FLAGS = {"nodes": "--nodes", "failures_per_node_day": "--failures-per-node-day",
          "write_s": "--write-s", "restart_s": "--restart-s"}


@app.callback()
def _advise() -> None:
    """Advice from the store's history."""


def measure_store(store: Store) -> MeasuredInputs:
    """The ETTR model's inputs measured from the runs in ``store`` (all None without runs)."""
    runs = load_runs(store)
    return measured_inputs(runs, failure_stats(runs))


def _measure(db: str | None) -> MeasuredInputs:
    with open_store(db, readonly=True) as store:
        return measure_store(store)


@app.command("checkpoint-interval")
@reflowed_doc  # typer's rich help keeps the line breaks of every paragraph after the first
def checkpoint_interval(
    db: DbOpt = None,
    nodes: Annotated[int | None, typer.Option(
        "--nodes", min=1, help="Nodes the job runs on (default: measured).")] = None,
    failures_per_node_day: Annotated[float | None, typer.Option(
        "--failures-per-node-day", min=0.0,
        help="Job-interrupting failures per node per day (default: measured).")] = None,
    write_s: Annotated[float | None, duration_option(
        "--write-s", min=0.0, help="Seconds a checkpoint blocks training (default: measured).")]
    = None,
    restart_s: Annotated[float | None, duration_option(
        "--restart-s", min=0.0,
        help="Seconds from a failure to training again (default: measured).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """The checkpoint interval that maximizes expected ETTR, with Young/Daly for comparison.

    Values not given are measured from the store. A failure rate measured from too little
    exposure gives "too little data" instead of an interval (--json keeps the raw figures with
    "supported": false).
    """
    given: dict[str, float | None] = {"nodes": None if nodes is None else float(nodes),
                                      "failures_per_node_day": failures_per_node_day,
                                      "write_s": write_s, "restart_s": restart_s}
    measured: MeasuredInputs | None = None
    try:
        if db is not None or any(v is None for v in given.values()):
            measured = _measure(db)
        sources: dict[str, Measurement | None] = {}
        values: dict[str, float] = {}
        unknown: list[str] = []
        for key, value in given.items():
            m = getattr(measured, key) if measured is not None else None
            if value is not None:
                values[key], sources[key] = value, None
            elif m is not None:
                values[key], sources[key] = m.value, m
            else:
                unknown.append(key)
        if unknown:
            fail("cannot measure " + ", ".join(unknown) + " from the store (no data); give "
                 + ", ".join(_FLAGS[k] for k in unknown), 2)
        current = measured.interval_s if measured is not None else None
        advice = advise(ModelInputs(**values), None if current is None else current.value)
    except TrainguardError as exc:
        fail(str(exc), 2)
    # an interval derived from a measured failure rate needs enough data behind that rate
    support = measured.interval_support(advice.optimal_interval_s) \
        if measured is not None and sources.get("failures_per_node_day") is not None else None
    if json_out:
        doc = {**advice.to_dict(),
               "supported": support is None or support.supported,
               "support": None if support is None else support.to_dict(),
               "inputs": {k: {"value": values[k], "source": "given" if m is None else "measured",
                              "samples": None if m is None else m.samples,
                              "what": None if m is None else m.source}
                          for k, m in sources.items()}}
        out.print_json(json.dumps(json_safe(doc)))
        return
    for key, m in sources.items():
        how = "given" if m is None else f"measured: {m.source}, {m.samples} sample(s)"
        if key == "failures_per_node_day" and support is not None and not support.supported:
            how += "; too little data"
        err.print(f"{key} = {values[key]:.4g} ({how})", markup=False)
    if support is not None and not support.supported:
        out.print(f"optimum: {support.caveat}; give --failures-per-node-day to use a known "
                  "rate", markup=False)
        return
    table = Table(title="expected ETTR by checkpoint interval", title_justify="left")
    for col in ("interval", "which", "expected ETTR"):
        table.add_column(col)
    for row in advice.rows:
        style = "bold" if row.label == "optimum" else ""
        table.add_row(_duration(row.interval_s), row.label, f"{row.ettr:.2%}", style=style)
    out.print(table)
    out.print(f"optimum: checkpoint every {_duration(advice.optimal_interval_s)}, expected ETTR "
              f"{advice.optimal_ettr:.2%}")
    yd = advice.young_daly_s
    out.print(f"Young/Daly sqrt(2 w / λ): {_duration(yd)}" + (
        "" if advice.young_daly_ettr is None else f", expected ETTR {advice.young_daly_ettr:.2%}"))


__all__ = ["app"]
