"""`roundoff show`: a sweep's results as a table in the terminal, optionally filtered."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from ..core.text import printable
from .judgement import print_judgement
from .terminal import reports_input_errors, wide_console


@dataclass(frozen=True)
class ShowRequest:
    """`roundoff show`'s folder and filter as given."""

    folder: Path
    where: str | None


@reports_input_errors
def show_command(request: ShowRequest) -> None:
    """Print the results of the request's folder, filtered by its `where`: a sweep's table, verdict and answer, or a
    training's summary."""
    folder, where = request.folder, request.where
    # Here, not at the top: pandas and torch load only when a table is read.
    from ..axes.grid import CONFIG_COLUMNS, Configuration
    from ..measuring.outcomes import Status
    from ..storage.filters import select
    from ..storage.result_schemas import TRAIN_MANIFEST
    from ..storage.results import load_results
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
    from ..core.errors import InputError
    from ..storage.filters import select
    from ..storage.table_schemas import read_table
    from ..storage.training_summary import SUMMARY_TABLE, with_later_columns
    from ..training.folder import REPORT, SUMMARY
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
