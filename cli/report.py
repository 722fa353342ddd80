"""`roundoff report`'s arguments; what it does is `roundoff_analyzer.commands.report`."""

from __future__ import annotations

from pathlib import Path

import typer

from roundoff_analyzer.commands import ReportRequest, report_command


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
    report_command(ReportRequest(folder=folder, out=out))
