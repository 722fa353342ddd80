"""The results as a rich table in the terminal, narrow enough for 100 columns: columns that say nothing (the same
value in every row, or no value at all) are left out and named in the caption, and numbers are written compactly
and never cut (their columns keep their width; text columns wrap instead)."""

from __future__ import annotations

import re

import pandas as pd
from rich import box
from rich.markup import escape
from rich.table import Table

from roundoff_analyzer.core.text import printable
from roundoff_analyzer.report.formatting import span

from .progress import STATUS_STYLE


def _short_exponent(text: str) -> str:
    """3.06e-04 -> 3.06e-4, 1.5e+10 -> 1.5e10."""
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m.group(1) == '-' else ''}{m.group(2)}", text)


def compact(value: float) -> str:
    """A scale as it is (65536, 0.0625), in six significant digits at most."""
    return _short_exponent(f"{value:.6g}")


def error(value: float) -> str:
    return _short_exponent(f"{value:.2e}")


# (header, column, format); a format other than str marks a number, right-aligned and never cut.
COLUMNS = (
    ("library", "library", str),
    ("method", "method", str),
    ("n", "n_timesteps", str),
    ("dtype", "dtype", str),
    ("scaling", "scaling", str),
    ("mode", "mode", str),
    ("status", "status", str),
    ("class", "failure_class", str),
    ("sol err", "sol_rel_err", error),
    ("grad y0 err", "grad_y0_rel_err", error),
    ("grad params err", "grad_params_rel_err", error),
    ("params err/u", "grad_params_rel_err_over_u", "{:.1f}".format),
    ("scale", "final_scale", compact),
    ("step", "overflow_step", lambda v: str(int(v))),
    ("arithmetic", "arithmetic", str),
)
# Shown only for a sweep that kept modules in float32, so that other tables stay as they were.
KEPT_COLUMNS = (("kept in float32", "keep_float32", str),)


# What a column's numbers mean, in the caption where the column is shown.
_NOTES = {
    "scale": "scale: where the scaler ended (grad: the loss scale of the GradScaler whose gradients were finite; "
    "dynamic: "
    "the native solver's last adjoint scale, a power of two)",
    "step": "step: the backward step where the overflow was found (0 = the first step back from t = {t1})",
}


def cell(value, fmt=str) -> str:
    """The value as the table shows it; stored text is stripped of control characters and rich markup is escaped."""
    return "" if value is None or (not isinstance(value, str) and pd.isna(value)) else escape(printable(fmt(value)))


# Shown only for a sweep over several checkpoints, so that other tables stay as they were.
CHECKPOINT_COLUMNS = (("checkpoint", "checkpoint", str), ("iteration", "train_iteration", lambda v: str(int(v))))


def _checkpoint_columns(results: pd.DataFrame) -> tuple:
    """None for a sweep of one checkpoint; the training iteration alone where it names each checkpoint (a train
    folder's); else the checkpoint's name beside it."""
    if "checkpoint" not in results or not results["checkpoint"].fillna("").ne("").any():
        return ()
    iterations = results.get("train_iteration")
    if iterations is not None and iterations.notna().all():
        pairs = results[["checkpoint", "train_iteration"]].drop_duplicates()
        if not pairs["checkpoint"].duplicated().any() and not pairs["train_iteration"].duplicated().any():
            return CHECKPOINT_COLUMNS[1:]
    return CHECKPOINT_COLUMNS


# Shown beside the mode only where a row formed its loss elsewhere than in float32, so that other tables stay as they
# were.
LOSS_IN_COLUMN = ("loss in", "loss_in", str)


def _with_loss_in(columns: tuple, results: pd.DataFrame) -> tuple:
    if "loss_in" not in results or (results["loss_in"].fillna("float32") == "float32").all():
        return columns
    at = [column for _, column, _ in columns].index("mode") + 1
    return (*columns[:at], LOSS_IN_COLUMN, *columns[at:])


def results_table(results: pd.DataFrame, title: str | None = None) -> Table:
    kept = "keep_float32" in results and results["keep_float32"].fillna("none").ne("none").any()
    columns = _with_loss_in(COLUMNS, results) + (KEPT_COLUMNS if kept else ()) + _checkpoint_columns(results)
    # a folder from before a column existed shows it empty
    texts = {
        column: [cell(v, fmt) for v in (results[column] if column in results else [None] * len(results))]
        for _, column, fmt in columns
    }
    shown, same, empty = [], [], []
    for header, column, fmt in columns:
        values = set(texts[column])
        if values <= {""} and len(results):
            empty.append(header)
        elif len(values) == 1 and len(results) > 1 and column != "status":
            same.append(f"{header} {values.pop()}")
        else:
            shown.append((header, column, fmt))
    t1 = span(results)[1]
    notes = [_NOTES[header].format(t1=t1) for header, _, _ in shown if header in _NOTES]
    caption = "; ".join(
        filter(
            None,
            [
                f"the same in every row: {', '.join(same)}" if same else "",
                f"no value in any row: {', '.join(empty)}" if empty else "",
                *notes,
            ],
        )
    )
    table = Table(
        title=title,
        caption=escape(caption) or None,
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for header, column, fmt in shown:
        # As wide as its longest value or header word, no wider: headers wrap between words, and rich has no reason
        # to squeeze (and cut) a column. Only a failure class, a checkpoint's name and the modules kept in float32 may
        # fold, being long words.
        width = max([len(text) for text in texts[column]] + [len(word) for word in header.split()])
        flexible = column in ("failure_class", "checkpoint", "keep_float32")
        table.add_column(
            header,
            justify="left" if fmt is str else "right",
            width=None if flexible else width,
            min_width=min(width, 8) if flexible else None,
            overflow="fold" if flexible else "ellipsis",
        )
    for i, status in enumerate(results["status"]):
        cells = [escape(texts[column][i]) for _, column, _ in shown]
        style = STATUS_STYLE.get(status)
        if style:
            at = [column for _, column, _ in shown].index("status")
            cells[at] = f"[{style}]{cells[at]}[/]"
        table.add_row(*cells)
    return table
