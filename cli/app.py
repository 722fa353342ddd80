"""The `roundoff` application: one Typer app, one module per command."""

from __future__ import annotations

import typer

from roundoff_analyzer import __version__

from .check import check
from .help_format import Command, Group
from .list_axes import list_axes
from .process_exit import exit_without_teardown
from .report import report
from .show import show
from .sweep import sweep
from .train import train

app = typer.Typer(
    name="roundoff",
    help="Measure what float16 and bfloat16 do to neural ODE solutions and gradients, against a float64 reference.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    cls=Group,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"roundoff-analyzer {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool | None = typer.Option(
        None,
        "--version",
        metavar="",
        callback=_print_version,
        is_eager=True,
        help="Show the version and exit.",
    ),
) -> None:
    """Measure what float16 and bfloat16 do to neural ODE solutions and gradients, against a float64 reference."""


app.command("sweep", cls=Command)(sweep)
app.command("list", cls=Command)(list_axes)
app.command("check", cls=Command)(check)
app.command("report", cls=Command)(report)
app.command("show", cls=Command)(show)
app.command("train", cls=Command)(train)


def main() -> None:
    """The `roundoff` command. Typer ends every invocation with SystemExit, whose status is kept."""
    try:
        app()
    except SystemExit as stop:
        exit_without_teardown(stop.code)
    exit_without_teardown(0)
