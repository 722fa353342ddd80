"""The report's tables, as markdown: accuracy ranges per setup,
error growth with n_timesteps, a failure group's runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from ..measuring.failures import FAILURE_KINDS
from ..measuring.outcomes import Status
from . import formatting, seed_words
from .findings import SETUP_COLUMNS, FailureGroup, Growth, in_grid_order, runs_in_grid_order

# (header, column) of the errors the accuracy tables show.
ERRORS = (
    ("solution", "sol_rel_err"),
    ("gradient w.r.t. y0", "grad_y0_rel_err"),
    ("parameter gradient", "grad_params_rel_err"),
)


def setup_headers(with_mode: bool) -> list[str]:
    return [c for c in SETUP_COLUMNS if with_mode or c != "mode"]


def _setup_cells(setup: tuple, with_mode: bool) -> list[str]:
    return [str(v) for c, v in zip(SETUP_COLUMNS, setup) if with_mode or c != "mode"]


def accuracy_table(results: pd.DataFrame, in_units_of_u: bool, with_mode: bool) -> str:
    """min – max over n_timesteps of each error, per setup that ran at least once; `ok` counts runs without failure."""
    ran = results[results["status"] != Status.SKIPPED]
    groups = {tuple(k): g for k, g in ran.groupby(list(SETUP_COLUMNS), sort=False)}
    suffix, number = ("_over_u", formatting.in_u) if in_units_of_u else ("", formatting.error)
    rows = []
    for setup in in_grid_order(results, list(groups)):
        runs = groups[setup]
        ok = f"{int((runs['status'] == Status.OK).sum())} of {len(runs)}"
        rows.append(
            _setup_cells(setup, with_mode)
            + [ok]
            + [formatting.value_range(runs[c + suffix], number) for _, c in ERRORS]
        )
    return formatting.bounded_table(rows, setup_headers(with_mode) + ["ok"] + [h for h, _ in ERRORS])


def growth_table(results: pd.DataFrame, found: list[Growth], with_mode: bool) -> str:
    """The parameter-gradient error at the smallest and largest n_timesteps each setup ran without failure."""
    order = in_grid_order(results, [g.setup for g in found])
    several = seed_words.several(results)
    rows = [
        _setup_cells(g.setup, with_mode)
        + ([str(g.seed)] if several else [])
        + [
            f"{g.timesteps[0]} → {g.timesteps[-1]}",
            formatting.error(g.values[0]),
            formatting.error(g.values[-1]),
            formatting.in_u(g.factor),
        ]
        for g in sorted(found, key=lambda g: (order.index(g.setup), g.seed or 0))
    ]
    return formatting.bounded_table(
        rows,
        setup_headers(with_mode)
        + (["seed"] if several else [])
        + ["n_timesteps", "error at smallest n", "error at largest n", "ratio"],
    )


# How a failure group's table shows each column its class adds (measuring/failures.py's `table_columns`).
_COLUMN_FORMATS: dict[str, Callable[[Any], str]] = {
    "overflow_phase": str,
    "overflow_step": formatting.integer,
    "max_abs_adjoint": formatting.in_u,
    "reference_max_abs_adjoint": formatting.in_u,
    "dtype_max": formatting.in_u,
    "grad_y0_rel_err": formatting.error,
    "grad_params_rel_err": formatting.error,
    "final_scale": formatting.in_u,
    "scale_retries": formatting.integer,
}


def _class_columns(failure_class: str) -> list[tuple[str, str, Callable[[Any], str]]]:
    columns = next((kind.table_columns for kind in FAILURE_KINDS.values() if kind.name == failure_class), ())
    return [(header, column, _COLUMN_FORMATS[column]) for header, column in columns]


def failure_group_table(group: FailureGroup, results: pd.DataFrame, with_mode: bool) -> str:
    extra = [(h, c, f) for h, c, f in _class_columns(group.failure_class) if c in group.rows]
    several = seed_words.several(results)
    headers = (
        ["library", "method", "n_timesteps", "dtype", "scaling"]
        + (["mode"] if with_mode else [])
        + (["seed"] if several else [])
        + [h for h, _, _ in extra]
    )
    if group.messages_differ:
        headers.append("message")
    rows = []
    for _, row in runs_in_grid_order(results, group.rows).iterrows():
        cells = [row["library"], row["method"], str(int(row["n_timesteps"])), row["dtype"], row["scaling"]]
        cells += [row["mode"]] if with_mode else []
        cells += seed_words.seed_cell(row, several)
        cells += [f(row[c]) if formatting.present(row[c]) else formatting.MISSING for _, c, f in extra]
        cells += [row["failure_message"] or formatting.MISSING] if group.messages_differ else []
        rows.append(cells)
    return formatting.markdown_table(rows, headers)


def worst_parameters_table(worst: pd.DataFrame, with_mode: bool, several: bool = False) -> str:
    """`several`: the runs span several initialisations; each row names its run's seed."""
    rows = [
        [
            r["dtype"],
            r["parameter"],
            formatting.error(r["grad_rel_err"]),
            formatting.in_u(r["grad_rel_err_over_u"]),
            r["library"],
            r["method"],
            str(int(r["n_timesteps"])),
            r["scaling"],
        ]
        + ([r["mode"]] if with_mode else [])
        + seed_words.seed_cell(r, several)
        for _, r in worst.iterrows()
    ]
    headers = ["dtype", "parameter", "largest error", "in u", "library", "method", "n_timesteps", "scaling"]
    return formatting.bounded_table(rows, headers + (["mode"] if with_mode else []) + (["seed"] if several else []))
