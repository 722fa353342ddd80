"""`roundoff show`'s arguments; what it does is `roundoff_analyzer.commands.show`."""

from __future__ import annotations

from pathlib import Path

import typer

from roundoff_analyzer.commands import ShowRequest, show_command


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
    show_command(ShowRequest(folder=folder, where=where))
