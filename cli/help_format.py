"""How --help reads: flags without a `<bool>` type, and each axis's values as its registry has them at that moment
(filled in only when help is shown, so that running a command imports nothing more for its help)."""
from __future__ import annotations

import importlib

import typer.core

# Placeholder in an option's help -> (module, registry) whose allowed names replace it.
AXES = {
    "{methods}": ("roundoff_analyzer.methods", "METHODS"),
    "{dtypes}": ("roundoff_analyzer.dtypes", "DTYPES"),
    "{scalings}": ("roundoff_analyzer.scalings", "SCALINGS"),
    "{modes}": ("roundoff_analyzer.modes", "MODES"),
    "{libraries}": ("roundoff_analyzer.libraries", "LIBRARIES"),
    "{arithmetics}": ("roundoff_analyzer.arithmetics", "ARITHMETICS"),
    "{roundings}": ("roundoff_analyzer.roundings", "ROUNDINGS"),
}


def axis_values(placeholder: str) -> str:
    module, name = AXES[placeholder]
    return ", ".join(getattr(importlib.import_module(module), name).allowed())


def _prepare(command, ctx) -> None:
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False):
            param.metavar = ""  # a flag takes no value: no `<bool>`
        for placeholder in AXES:
            if getattr(param, "help", None) and placeholder in param.help:
                param.help = param.help.replace(placeholder, axis_values(placeholder))


class Command(typer.core.TyperCommand):
    def format_help(self, ctx, formatter) -> None:
        _prepare(self, ctx)
        super().format_help(ctx, formatter)


class Group(typer.core.TyperGroup):
    def format_help(self, ctx, formatter) -> None:
        _prepare(self, ctx)
        super().format_help(ctx, formatter)
