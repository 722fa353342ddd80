"""The options `roundoff sweep` and `roundoff train` both take, written once: each a function of the help panel it
is listed under (the two commands group their options differently), with the defaults --help shows read from the
settings' own definitions."""

from __future__ import annotations

from typing import Any

import typer

# The scaler's settings import neither torch nor pandas: --help shows their defaults at once.
from roundoff_analyzer.commands import SCALER_FIELDS


def shown_default(fields: dict[str, Any], name: str) -> str:
    """A setting's default as --help shows it, read from its pydantic field."""
    value = fields[name].get_default(call_default_factory=True)
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _scaler_default(name: str) -> str:
    return shown_default(SCALER_FIELDS, name)


def data_option(panel: str) -> Any:
    return typer.Option(
        None,
        "--data",
        help=(
            "Data: synthetic, 2spirals, 8gaussians, or bsds300:PATH with an optional ?split=train (or validation, "
            "test)."
        ),
        show_default="the model's",
        rich_help_panel=panel,
    )


def device_option(panel: str, default: str) -> Any:
    return typer.Option(None, help="auto, cpu, cuda or cuda:N.", show_default=default, rich_help_panel=panel)


def _scaler_option(name: str, help: str, panel: str) -> Any:
    return typer.Option(
        None, f"--{name.replace('_', '-')}", help=help, show_default=_scaler_default(name), rich_help_panel=panel
    )


def init_scale_option(panel: str) -> Any:
    return _scaler_option("init_scale", "grad: initial loss scale.", panel)


def backoff_factor_option(panel: str) -> Any:
    return _scaler_option("backoff_factor", "grad: factor on the loss scale after a non-finite gradient.", panel)


def max_retries_option(panel: str, per: str) -> Any:
    """`per`: what one search's retries are counted over, as the command's help says it."""
    solver = "solver " if per else ""
    return _scaler_option(
        "max_retries", f"grad: backoffs{per} at most; dynamic: halvings per {solver}step at most.", panel
    )
