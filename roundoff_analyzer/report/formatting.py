"""How numbers, names and tables are written in the report; one place, so that tables and prose agree."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd
from tabulate import tabulate

# The report's modules read these here.
from ..axes.libraries.base import import_line_of, library_member, writes_no_code  # noqa: F401
from ..axes.scalings import SCALINGS, ScalingCode
from .findings import SETUP_COLUMNS

MISSING = "—"


def scaling_words(name: str) -> str:
    """How a sentence names a scaling ("`grad` loss scaling"): its own words, or "`NAME` scaling" for one not
    registered here (a plug-in of the machine that ran the sweep). Registered names only: reading results runs no
    plug-in's code."""
    return SCALINGS.get(name).words if name in SCALINGS.names() else f"`{name}` scaling"


def library_import_line(name: str) -> str | None:
    """The line a training script imports its `odeint` with to solve as library `name` does: the library's own
    `import_line` (None: the script's torchdiffeq import stands), else the one-line refusal of code (`writes_no_code`).
    Registered names only, as for a scaling's words."""
    return import_line_of(name)


def scaling_code(name: str) -> ScalingCode:
    """How the answer's code writes a scaling: its own record, or a plain backward for one not registered here."""
    return SCALINGS.get(name).code if name in SCALINGS.names() else ScalingCode()


def scaling_searches(name: str) -> bool:
    """Whether a scaling's backward searches a loss scale (its time then holds the search's passes)."""
    return SCALINGS.get(name).searches_scale if name in SCALINGS.names() else False


def scaling_glossary(name: str) -> str | None:
    """A scaling's entry in the report's words, where it has one."""
    return SCALINGS.get(name).glossary if name in SCALINGS.names() else None


RANGE_DASH = " – "


def span(results: pd.DataFrame | None) -> tuple[str, str]:
    """The span of the model's (first) solve, t0 and t1 as the report writes them; [0, 1] where not recorded."""
    if results is None or "t0" not in results or "t1" not in results or results["t0"].isna().all():
        return "0", "1"
    row = results.dropna(subset=["t0", "t1"]).iloc[0]
    return f"{row['t0']:.4g}", f"{row['t1']:.4g}"


def present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def error(value) -> str:
    """A relative error: three significant digits in scientific notation, so columns line up by exponent."""
    return f"{value:.2e}" if present(value) else MISSING


def in_u(value) -> str:
    """An error in units of the unit roundoff, or a magnitude such as a scale: three significant digits."""
    return f"{value:.3g}" if present(value) else MISSING


def noise_at(batch_size: int | None) -> str:
    """'the gradient noise at batch 64': every ratio to the noise says which batch size it was measured at."""
    return "the gradient noise" + (f" at batch {batch_size}" if batch_size else "")


def plus_minus(uncertainty: float) -> str:
    """A relative uncertainty to two significant digits: '±18%', '±3.4%', '±0.66%'."""
    return f"±{100 * uncertainty:.2g}%"


def near(threshold: float | None, uncertainty: float | None, lead: str = "; ") -> str:
    """'; within the noise's ±18% of the 0.1× threshold: …', where a ratio to the noise could lie on either side of
    it (to close a parenthesis the ratio stands in); nothing where it could not."""
    if threshold is None or uncertainty is None:
        return ""
    return (
        f"{lead}within the noise's {plus_minus(uncertainty)} of the {threshold:g}× threshold: another draw of its "
        "batches could put it on the other side"
    )


def integer(value) -> str:
    return str(int(value)) if present(value) else MISSING


def value_range(values: Iterable, fmt) -> str:
    """'min – max' of the present values (one value when both read the same), or the missing mark."""
    values = [v for v in values if present(v)]
    if not values:
        return MISSING
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}{RANGE_DASH}{high}"


def listing(items: Iterable) -> str:
    return ", ".join(str(i) for i in items)


def plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


def setup_label(setup: Sequence, with_mode: bool) -> str:
    """'native euler float16 dynamic' (and the mode when the sweep has more than one)."""
    named = dict(zip(SETUP_COLUMNS, setup))
    parts = [named["library"], named["method"], named["dtype"], named["scaling"]]
    return " ".join(parts + [named["mode"]] if with_mode else parts)


def setups_label(setups: Sequence[Sequence], with_mode: bool) -> str:
    """Several setups in one phrase; those that differ only in scaling
    share one: 'native euler float16 (scaling none or grad)'."""
    by_rest: dict[tuple, list[str]] = {}
    for setup in setups:
        named = dict(zip(SETUP_COLUMNS, setup))
        by_rest.setdefault(tuple(v for c, v in named.items() if c != "scaling"), []).append(named["scaling"])
    phrases = []
    for rest, scalings in by_rest.items():
        named = dict(zip([c for c in SETUP_COLUMNS if c != "scaling"], rest))
        base = " ".join([named["library"], named["method"], named["dtype"]] + ([named["mode"]] if with_mode else []))
        phrases.append(f"{base} with scaling {either(scalings)}")
    return either(phrases, separator="; ")


def either(items: Sequence[str], separator: str = ", ") -> str:
    """'a', 'a or b', 'a, b or c'."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{separator.join(items[:-1])} or {items[-1]}"


def escape_cell(text: str) -> str:
    """A table cell that cannot break its table: no pipes, no line breaks."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence], headers: Sequence[str]) -> str:
    cells = [[escape_cell(c) for c in row] for row in rows]
    # Cells are already formatted: tabulate must not re-parse "3.06e-04" into a float and reformat it.
    return tabulate(cells, headers=[escape_cell(h) for h in headers], tablefmt="github", disable_numparse=True)


# A section shows this many rows, items or names in full; beyond it, it summarises (every row stays in the Parquet,
# which `roundoff show` prints), so that a report stays short however large the grid.
FEW = 12
IN_THE_PARQUET = "every one is in results.parquet (`roundoff show`)"


def bounded_items(items: Sequence[str], noun: str = "more", limit: int = FEW) -> list[str]:
    """The first `limit` items, then one item saying how many more there are."""
    items = list(items)
    if len(items) <= limit:
        return items
    return items[:limit] + [f"… and {len(items) - limit} {noun} ({IN_THE_PARQUET})."]


def bounded_listing(items: Iterable, limit: int = FEW) -> str:
    """'a, b, c' for a few; 'a, b, …, z (80 in all)' for many."""
    items = [str(i) for i in items]
    if len(items) <= limit:
        return listing(items)
    return f"{listing(items[: limit - 1])}, …, {items[-1]} ({len(items)} in all)"


def bounded_table(rows: Sequence[Sequence], headers: Sequence[str], limit: int = FEW) -> str:
    """A markdown table of at most `limit` rows; a line under it says how many were left out."""
    if len(rows) <= limit:
        return markdown_table(rows, headers)
    return f"{markdown_table(rows[:limit], headers)}\n\nThe first {limit} of {len(rows)} rows; {IN_THE_PARQUET}."


def unit_roundoffs(results: pd.DataFrame, word: str = "for") -> str:
    """'6.10e-05 for float16, 3.91e-03 for bfloat16', or for many dtypes the range of u and where it lies."""
    units = results.drop_duplicates("dtype")[["dtype", "unit_roundoff"]]
    if len(units) <= FEW:
        return ", ".join(f"{error(u)} {word} {d}" for d, u in units.itertuples(index=False))
    low, high = units.loc[units["unit_roundoff"].idxmin()], units.loc[units["unit_roundoff"].idxmax()]
    return (
        f"from {error(low['unit_roundoff'])} {word} {low['dtype']} to {error(high['unit_roundoff'])} {word} "
        f"{high['dtype']} over the {len(units)} dtypes (u = 2^-(mantissa bits + 1))"
    )
