"""`roundoff report`: write a sweep folder's markdown report and figures."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from roundoff_analyzer.core.text import printable

from .common import reports_input_errors


@reports_input_errors
def report(
    folder: Path = typer.Argument(
        ...,
        help="Sweep folder (what `roundoff sweep --out` wrote), or a training folder (`roundoff train --out`).",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Markdown file to write (default: FOLDER/report.md, or FOLDER/training_report.md).",
    ),
) -> None:
    """Write a markdown report of a sweep (findings, accuracy tables, figures) from its Parquet tables, or of a
    training."""
    # Here, not at the top: pandas, matplotlib and torch load only when a report is written.
    from roundoff_analyzer.core.safe_files import refuse_links
    from roundoff_analyzer.report import FIGURES, REPORT, write_report
    from roundoff_analyzer.storage.result_schemas import RESULTS
    from roundoff_analyzer.training.folder import REPORT as TRAINING_REPORT
    from roundoff_analyzer.training.folder import TRAIN_MANIFEST
    from roundoff_analyzer.training.training_report import write_training_report

    if (folder / TRAIN_MANIFEST).is_file() and not (folder / RESULTS).is_file():
        refuse_links(folder, [FIGURES] + ([] if out else [TRAINING_REPORT]))
        written = write_training_report(folder, out)
        Console(highlight=False, soft_wrap=True, emoji=False).print(
            printable(f"report: {written} (figures in {folder / FIGURES})"), markup=False
        )
        return
    # written into the folder: never through a link out of it
    refuse_links(folder, [FIGURES] + ([] if out else [REPORT]))
    written = write_report(folder, out)
    Console(highlight=False, soft_wrap=True, emoji=False).print(
        printable(f"report: {written} (figures in {folder / FIGURES})"), markup=False
    )
