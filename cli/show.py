"""`roundoff show`: a sweep's results as a table in the terminal, optionally filtered."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import typer
from rich.markup import escape

from roundoff_analyzer.errors import InputError, one_line
from roundoff_analyzer.grid import CONFIG_COLUMNS, Configuration
from roundoff_analyzer.report.verdict_section import verdict_lines
from roundoff_analyzer.results import load_results

from .common import reports_input_errors, wide_console
from .tables import results_table


@reports_input_errors
def show(
    folder: Path = typer.Argument(..., help="Sweep folder, or a results .parquet file."),
    where: Optional[str] = typer.Option(None, "--where", "-w", help="""pandas query, e.g. "dtype == 'float16' and status == 'failed'"."""),
) -> None:
    """Show the results of a sweep as a table; failures in red, skipped in yellow."""
    results = load_results(folder)
    shown = filtered(results, where) if where else results
    console = wide_console()
    console.print(results_table(shown, title=f"{folder}: {len(shown)} of {len(results)} configurations"))
    if shown.empty:
        console.print("no configuration matches --where", highlight=False)
    for line in verdict_lines(shown):
        console.print(f"verdict: {escape(line.replace('**', ''))}", highlight=False)
    # The table has the failure class; the message says what happened.
    for row in shown[shown["status"] == "failed"].to_dict("records"):
        label = Configuration(**{c: row[c] for c in CONFIG_COLUMNS}).label()
        failure = f"{row['failure_class']}: {row['failure_message']}"
        console.print(f"[red]failed[/] {escape(label)}: {escape(failure)}", highlight=False)


def filtered(results: pd.DataFrame, where: str) -> pd.DataFrame:
    try:
        selected = results.query(where)
    except Exception as exc:  # noqa: BLE001 - pandas raises many kinds for a bad expression; all are bad input
        raise InputError(f"--where '{where}' is not a valid filter ({one_line(exc)}); columns: {', '.join(results.columns)}") from None
    if not isinstance(selected, pd.DataFrame):
        raise InputError(f"--where '{where}' does not select rows; give a condition such as \"dtype == 'float16'\"")
    return selected
