"""`roundoff list`'s options; what it does is `roundoff_analyzer.commands.list_axes`."""

from __future__ import annotations

import typer

from roundoff_analyzer.commands import ListRequest, list_command


def list_axes(
    device: str = typer.Option(
        "auto",
        help="Device to check dtypes against.",
    ),
    library: list[str] = typer.Option(
        [],
        "--library",
        help="Also load your own library (package.module:object or path/to/file.py:object).",
    ),
) -> None:
    """Show every value of every axis, and whether it can run on this machine."""
    list_command(ListRequest(device=device, library=library))
