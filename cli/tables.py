"""The results as a rich table in the terminal."""
from __future__ import annotations

import pandas as pd
from rich.markup import escape
from rich.table import Table

from roundoff_analyzer.text import printable

from .progress import STATUS_STYLE

COLUMNS = (
    ("library", "library", str), ("method", "method", str), ("n", "n_timesteps", str), ("dtype", "dtype", str),
    ("scaling", "scaling", str), ("mode", "mode", str), ("status", "status", str), ("class", "failure_class", str),
    ("sol err", "sol_rel_err", "{:.2e}".format), ("grad y0 err", "grad_y0_rel_err", "{:.2e}".format),
    ("grad params err", "grad_params_rel_err", "{:.2e}".format), ("params err/u", "grad_params_rel_err_over_u", "{:.1f}".format),
    ("scale", "final_scale", "{:g}".format), ("overflow step", "overflow_step", lambda v: str(int(v))),
    ("arithmetic", "arithmetic", str),
)  # fmt: skip


def cell(value, fmt=str) -> str:
    """The value as the table shows it; stored text is stripped of control characters and rich markup is escaped."""
    return "" if value is None or (not isinstance(value, str) and pd.isna(value)) else escape(printable(fmt(value)))


def results_table(results: pd.DataFrame, title: str | None = None) -> Table:
    table = Table(title=title, header_style="bold")
    for header, column, fmt in COLUMNS:
        table.add_column(header, justify="left" if fmt is str else "right")
    for row in results.to_dict("records"):
        cells = [cell(row.get(column), fmt) for _, column, fmt in COLUMNS]
        style = STATUS_STYLE.get(row["status"])
        cells[6] = f"[{style}]{cells[6]}[/]" if style else cells[6]
        table.add_row(*cells)
    return table
