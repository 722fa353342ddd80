"""How --help reads: flags without a `<bool>` type, and each axis's values by name (filled in only when help is
shown, from `roundoff_analyzer.axes.names` by way of `roundoff_analyzer.commands`, so that help imports no registry
and so no torch)."""

from __future__ import annotations

import inspect
from typing import Any

import typer.core

from roundoff_analyzer.commands import axis_names

# Placeholder in an option's help -> the axis whose values replace it.
AXES = {
    f"{{{axis}}}": axis
    for axis in (
        "methods",
        "dtypes",
        "scalings",
        "modes",
        "libraries",
        "arithmetics",
        "roundings",
        "loss_placements",
        "executors",
        "updates",
    )
}


def axis_values(placeholder: str) -> str:
    return ", ".join(axis_names(AXES[placeholder]))


def _prepare(command, ctx) -> None:
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False):
            param.metavar = ""  # a flag takes no value: no `<bool>`
        for placeholder in AXES:
            if getattr(param, "help", None) and placeholder in param.help:
                param.help = param.help.replace(placeholder, axis_values(placeholder))


def unwrapped(help_text: str | None) -> str | None:
    """A docstring's paragraphs each on one line: the source wraps them at its line length, help wraps them at the
    terminal's width."""
    if not help_text:
        return help_text
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in paragraph.splitlines()) for paragraph in paragraphs)


class Command(typer.core.TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)

    def format_help(self, ctx, formatter) -> None:
        _prepare(self, ctx)
        super().format_help(ctx, formatter)


class Group(typer.core.TyperGroup):
    def format_help(self, ctx, formatter) -> None:
        _prepare(self, ctx)
        super().format_help(ctx, formatter)
