"""`roundoff show`: a sweep's results as a table in the terminal, optionally filtered."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from roundoff_analyzer.core.text import printable

from .common import reports_input_errors, wide_console
from .judgement import print_judgement


@reports_input_errors
def show(
    folder: Path = typer.Argument(
        ...,
        help="Sweep folder, or a results .parquet file.",
    ),
    where: str | None = typer.Option(
        None,
        "--where",
        "-w",
        help=(
            """Filter, e.g. "dtype == 'float16' and status == 'failed'": columns, numbers, 'strings', """
            "== != < <= > >=, in [..], and, or, not (see docs/report.md)."
        ),
    ),
) -> None:
    """Show the results of a sweep as a table; failures in red, skipped in yellow."""
    # Here, not at the top: pandas and torch load only when a table is read.
    from roundoff_analyzer.axes.grid import CONFIG_COLUMNS, Configuration
    from roundoff_analyzer.storage.filters import select
    from roundoff_analyzer.storage.results import load_results

    from .tables import results_table

    results = load_results(folder)
    shown = select(results, where) if where else results
    console = wide_console()
    console.print(results_table(shown, title=f"{printable(folder)}: {len(shown)} of {len(results)} configurations"))
    if shown.empty:
        console.print("no configuration matches --where", highlight=False)
    print_judgement(console, results, folder, shown=len(shown) if where else None)
    # The table has the failure class; the message says what happened.
    for row in shown[shown["status"] == "failed"].to_dict("records"):
        label = Configuration(**{c: row[c] for c in CONFIG_COLUMNS}).label()
        failure = f"{row['failure_class']}: {row['failure_message']}"
        console.print(f"[red]failed[/] {escape(printable(label))}: {escape(printable(failure))}", highlight=False)
