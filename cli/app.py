"""The `roundoff` application: one Typer app, one module per command."""
from __future__ import annotations

import typer

from .check import check
from .list_axes import list_axes
from .report import report
from .show import show
from .sweep import sweep

app = typer.Typer(
    name="roundoff",
    help="Measure what float16 and bfloat16 do to neural ODE solutions and gradients, against a float64 reference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("sweep")(sweep)
app.command("list")(list_axes)
app.command("check")(check)
app.command("report")(report)
app.command("show")(show)


def main() -> None:
    app()
