"""`roundoff show`: a sweep's results as a table in the terminal, optionally filtered."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from roundoff_analyzer.core.text import printable
from roundoff_analyzer.measuring.outcomes import Status

from .common import reports_input_errors, wide_console
from .judgement import print_judgement


@reports_input_errors
def show(
    folder: Path = typer.Argument(
        ...,
        help="Sweep folder, a results .parquet file, or a training folder (its summary).",
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
    """Show the results of a sweep as a table; failures in red, skipped in yellow. A training's folder: its summary."""
    # Here, not at the top: pandas and torch load only when a table is read.
    from roundoff_analyzer.axes.grid import CONFIG_COLUMNS, Configuration
    from roundoff_analyzer.storage.filters import select
    from roundoff_analyzer.storage.result_schemas import TRAIN_MANIFEST
    from roundoff_analyzer.storage.results import load_results

    from .tables import results_table

    if folder.is_dir() and (folder / TRAIN_MANIFEST).is_file():
        _show_training(folder, where)
        return
    results = load_results(folder)
    shown = select(results, where) if where else results
    console = wide_console()
    console.print(
        results_table(shown, title=f"{escape(printable(folder))}: {len(shown)} of {len(results)} configurations")
    )
    if shown.empty:
        console.print("no configuration matches --where", highlight=False)
    print_judgement(console, results, folder, shown=len(shown) if where else None)
    # The table has the failure class; the message says what happened.
    for row in shown[shown["status"] == Status.FAILED].to_dict("records"):
        label = Configuration(**{c: row[c] for c in CONFIG_COLUMNS}).label()
        failure = f"{row['failure_class']}: {row['failure_message']}"
        console.print(f"[red]failed[/] {escape(printable(label))}: {escape(printable(failure))}", highlight=False)


def _show_training(folder: Path, where: str | None) -> None:
    """A training's summary, as `roundoff train` printed it at its end, and where its report is."""
    from roundoff_analyzer.core.errors import InputError
    from roundoff_analyzer.storage.filters import select
    from roundoff_analyzer.storage.table_schemas import read_table
    from roundoff_analyzer.storage.training_summary import SUMMARY_TABLE, with_later_columns
    from roundoff_analyzer.training.folder import REPORT, SUMMARY

    from .tables import print_training_summary

    if not (folder / SUMMARY).is_file():
        raise InputError(
            f"training folder '{printable(folder)}' has no {SUMMARY}: its training has not finished; run the same "
            "`roundoff train` command again to finish it"
        )
    summary = with_later_columns(read_table(folder / SUMMARY, SUMMARY_TABLE))
    shown = select(summary, where) if where else summary
    console = wide_console()
    console.print(
        f"{printable(folder)}: a training, {len(shown)} of {len(summary)} setups", highlight=False, markup=False
    )
    print_training_summary(console, shown)
    report = folder / REPORT
    console.print(
        f"report: {printable(report)}"
        if report.is_file()
        else f"no {REPORT}: write it with `roundoff report {printable(folder)}`",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
