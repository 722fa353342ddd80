"""Remembering a pure function of the results table for the tables it saw last: a report asks for the verdicts and
the answers in several sections, and judging a large sweep takes seconds.

Keyed by the table object itself (a weak reference, so nothing is kept alive), which the report never changes in
place; a new or changed table is a new object and is judged afresh.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

import pandas as pd

T = TypeVar("T")
REMEMBERED = 4  # tables: the report's own, its judged rows and their views by placement


def per_table(function: Callable[[pd.DataFrame], list[T]]) -> Callable[[pd.DataFrame], list[T]]:
    remembered: list[tuple[weakref.ref, list[T]]] = []

    @functools.wraps(function)
    def remembering(table: pd.DataFrame) -> list[T]:
        for seen, value in remembered:
            if seen() is table:
                return list(value)
        value = function(table)
        remembered[:] = [(weakref.ref(table), value), *remembered[: REMEMBERED - 1]]
        return list(value)

    return remembering
