"""Which backward the native solver ran for a set of rows (the results' `backward_mode`), in words, and whether the
rows a comparison sets side by side ran the same one: a ratio of two rows that ran different modes compares two
designs (stored stages against a recomputation from stored states), not only their dtypes."""

from __future__ import annotations

import pandas as pd

COLUMN = "backward_mode"
# The solver's modes (SolveReport.checkpoint) as the report says them.
WORDS = {"stages": "stored stages", "states": "recomputed from stored states"}


def modes(rows: pd.DataFrame, column: str = COLUMN) -> tuple[str, ...]:
    """The modes the rows ran (`column`: where a merge has suffixed it), in WORDS' order (a row whose repeats ran both
    names each); empty where none was recorded (another library, or a table from before the column)."""
    if column not in rows:
        return ()
    ran = {mode for value in rows[column].dropna() for mode in str(value).split("+")}
    return tuple(mode for mode in WORDS if mode in ran) + tuple(sorted(ran - set(WORDS)))


def said(ran: tuple[str, ...]) -> str:
    """'stored stages', 'recomputed from stored states', or both joined: 'stored stages and recomputed from ...'."""
    return " and ".join(WORDS.get(mode, mode) for mode in ran)
