"""How numbers, names and tables are written in the report; one place, so that tables and prose agree."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from tabulate import tabulate

from .findings import SETUP_COLUMNS

MISSING = "—"
SCALING_WORDS = {"none": "no scaling", "grad": "`grad` loss scaling", "dynamic": "`dynamic` adjoint scaling"}
RANGE_DASH = " – "


def present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def error(value) -> str:
    """A relative error: three significant digits in scientific notation, so columns line up by exponent."""
    return f"{value:.2e}" if present(value) else MISSING


def in_u(value) -> str:
    """An error in units of the unit roundoff, or a magnitude such as a scale: three significant digits."""
    return f"{value:.3g}" if present(value) else MISSING


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
    """Several setups in one phrase; those that differ only in scaling share one: 'native euler float16 (scaling none or grad)'."""
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
