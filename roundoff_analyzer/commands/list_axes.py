"""`roundoff list`: every model, library, method, dtype, scaling, mode and executor, and whether it can run here."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

from .terminal import reports_input_errors, wide_console


@dataclass(frozen=True)
class ListRequest:
    """`roundoff list`'s options as given."""

    device: str
    library: list[str]


@reports_input_errors
def list_command(request: ListRequest) -> None:
    """Print every value of every axis, and whether it can run on the request's device."""
    # Here, not at the top: the registries import torch, which `roundoff --help` and the other commands do without.
    from ..axes.arithmetics import ARITHMETICS
    from ..axes.data import DATA_SOURCES
    from ..axes.dtypes import DTYPES
    from ..axes.libraries import ENTRY_POINT_GROUP, LIBRARIES, MISSING_LIBRARIES, resolve_library
    from ..axes.libraries import FORMS as LIBRARY_FORMS
    from ..axes.loss_placements import LOSS_PLACEMENTS
    from ..axes.methods import METHODS
    from ..axes.models import MODELS
    from ..axes.models.factory import FORMS
    from ..axes.modes import MODES
    from ..axes.roundings import ROUNDINGS
    from ..axes.scalings import SCALINGS
    from ..core.devices import resolve_device
    from ..execution.executors import EXECUTORS

    for name in request.library:
        resolve_library(name)
    console = wide_console(piped_width=160)  # long descriptions and install lines read best unwrapped
    where = resolve_device(request.device)
    table = Table(title=f"what roundoff can sweep (checked on {where})", header_style="bold")
    for column in ("axis", "name", "runs here", "about"):
        table.add_column(column)
    for model in MODELS:
        fields = ", ".join(f"{k}={v.default}" for k, v in model.options_type.model_fields.items())
        table.add_row(
            "model",
            model.name,
            "yes",
            escape(f"{model.description}; options: {fields}; default data: {model.default_data}"),
        )
    table.add_row(
        "model",
        "your own",
        "yes",
        escape(f"--model {FORMS} (a function of the -o options returning func, y0 and loss; see docs/own-code.md)"),
    )
    for source in DATA_SOURCES:
        fields = ", ".join(f"{k}={v.default}" for k, v in source.options_type.model_fields.items())
        usage = f"--data {source.name}" + (":PATH" if source.needs_path else "") + (f"?{fields}" if fields else "")
        table.add_row("data", source.name, "yes", escape(f"{source.description}; {usage}"))
    for name, solver_library in zip(LIBRARIES.names(), LIBRARIES):
        table.add_row("library", escape(name), "yes", escape(solver_library.description))
    for missing in MISSING_LIBRARIES:
        install = f"; install: {missing.install}" if missing.install else ""
        table.add_row(
            "library", escape(missing.name), f"[red]no[/]: {escape(missing.reason)}", escape(install.removeprefix("; "))
        )
    table.add_row(
        "library",
        "your own",
        "yes",
        escape(
            f"--library {LIBRARY_FORMS}, or an installed package's entry point in the group {ENTRY_POINT_GROUP} (a "
            "SolverLibrary; see docs/own-code.md)"
        ),
    )
    for method in METHODS:
        table.add_row("method", method.name, "yes", escape(method.description))
    for dtype in DTYPES:
        reason = dtype.unsupported_reason(where)
        runs = "[green]yes[/]" if reason is None else f"[yellow]emulated only[/]: {escape(reason)}"
        table.add_row("dtype", dtype.name, runs, escape(dtype.describe()))
    for form in DTYPES.allowed()[len(DTYPES.names()) :]:
        table.add_row(
            "dtype",
            form,
            "[yellow]emulated only[/]",
            "IEEE-like with subnormals; u = 2^-(Y+1), max (2 - 2^-Y) 2^(2^(X-1) - 1)",
        )
    for arithmetic in ARITHMETICS:
        table.add_row("arithmetic", arithmetic.name, "yes", escape(arithmetic.description))
    for rounding in ROUNDINGS:
        table.add_row("rounding", rounding.name, "yes", rounding.description)
    for scaling in SCALINGS:
        table.add_row("scaling", scaling.name, "yes", escape(scaling.description))
    for mode in MODES:
        table.add_row("mode", mode.name, "yes", escape(mode.description))
    for placement in LOSS_PLACEMENTS:
        table.add_row("loss_in", placement.name, "yes", escape(placement.description))
    for executor in EXECUTORS:
        reason = executor.unavailable_reason()
        table.add_row(
            "executor",
            executor.name,
            "[green]yes[/]" if reason is None else f"[red]no[/]: {escape(reason)}",
            escape(executor.description),
        )
    console.print(table)
