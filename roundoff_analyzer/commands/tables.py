"""The results as a rich table in the terminal, narrow enough for 100 columns: columns that say nothing (the same
value in every row, or no value at all) are left out and named in the caption, and numbers are written compactly
and never cut (their columns keep their width; text columns wrap instead). A training's summary likewise, and where
even its narrowest table is wider than the terminal, one paragraph per setup instead."""

from __future__ import annotations

import re

import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..core.text import printable
from ..execution.progress_bar import STATUS_STYLE
from ..report.formatting import span


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


# Shown only for a sweep over several seeds, so that other tables stay as they were: its rows would otherwise read as
# one configuration written several times.
SEED_COLUMNS = (("seed", "seed", lambda v: str(int(v))),)


def results_table(results: pd.DataFrame, title: str | None = None) -> Table:
    kept = "keep_float32" in results and results["keep_float32"].fillna("none").ne("none").any()
    seeds = SEED_COLUMNS if "seed" in results and results["seed"].nunique() > 1 else ()
    columns = _with_loss_in(COLUMNS, results) + (KEPT_COLUMNS if kept else ()) + _checkpoint_columns(results) + seeds
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


# The training summary's numbers, each right-aligned in a column as wide as its longest value: never folded or cut.
TRAINING_COLUMNS = (
    "iterations",
    "skipped",
    "final loss",
    "final val loss",
    "val vs first",
    "lost updates",
    "time / iter",
)
TRAINING_TITLE = "training: final losses against the first setup"


def _training_rows(summary: pd.DataFrame) -> list[tuple[str, list[str]]]:
    rows = []
    for row in summary.itertuples(index=False):
        rel, lost = row.val_loss_rel_to_reference, row.lost_update_fraction
        # The interleaved rounds' median where they were timed (training/timing.py), else the training's own mean.
        timed = getattr(row, "interleaved_iter_s", None)
        seconds = timed if timed is not None and pd.notna(timed) else row.time_per_iter_s
        cells = [
            str(row.iterations),
            str(row.skipped_steps),
            _five_digits(row.final_loss),
            _five_digits(row.final_val_loss),
            f"{100 * rel:+.3g}%" if pd.notna(rel) else "—",
            f"{100 * lost:.3g}%" if pd.notna(lost) else "—",
            f"{seconds:.3g} s" if pd.notna(seconds) else "—",
        ]
        rows.append((printable(row.setup), cells))
    return rows


def _five_digits(value) -> str:
    return f"{value:.5g}" if pd.notna(value) else "—"


def training_table(summary: pd.DataFrame) -> Table:
    """The summary as a table: every column as wide as its longest value (headers wrap between words)."""
    rows = _training_rows(summary)
    table = Table(title=TRAINING_TITLE, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("setup", no_wrap=True)
    for i, header in enumerate(TRAINING_COLUMNS):
        width = max([len(cells[i]) for _, cells in rows] + [len(word) for word in header.split()])
        table.add_column(header, justify="right", width=width)
    for label, cells in rows:
        table.add_row(escape(label), *cells)
    return table


def print_training_summary(console: Console, summary: pd.DataFrame) -> None:
    """The table where it fits the terminal with every label and number whole; else a paragraph per setup, which
    wraps between a name and its value, never inside a number."""
    table = training_table(summary)
    # Measured as if the terminal had no edge: rich caps a measurement at the width it is given.
    if Measurement.get(console, console.options.update_width(10_000), table).minimum <= console.width:
        console.print(table)
        return
    console.print(TRAINING_TITLE, style="italic", highlight=False)
    for label, cells in _training_rows(summary):
        console.print(Text(label, style="bold"), overflow="fold")
        pairs = [f"{header} {cell}" for header, cell in zip(TRAINING_COLUMNS, cells)]
        for line in _packed(pairs, console.width - 2):
            console.print(Padding(Text(line), (0, 0, 0, 2)), highlight=False, overflow="fold")


def _packed(pairs: list[str], width: int) -> list[str]:
    """The pairs joined by "; " into lines of at most `width`, a line breaking only between two pairs (a value's unit
    stays beside its number: "0.01 s"); a pair longer than a line has one of its own."""
    lines: list[str] = []
    for pair in pairs:
        if lines and len(f"{lines[-1]}; {pair}") <= width:
            lines[-1] = f"{lines[-1]}; {pair}"
        else:
            if lines:
                lines[-1] += ";"
            lines.append(pair)
    return lines
