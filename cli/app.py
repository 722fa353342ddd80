"""The `roundoff` application: one Typer app, one module per command."""
from __future__ import annotations

import typer

from .list_axes import list_axes
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


def main() -> None:
    app()
