"""The format search: over a sweep of several formats, the narrowest that is safe for training and the narrowest
exponent width that never overflows. Pure functions of the results table.

Each format (a dtype as the verdict labels it) is judged by its best setup: the answer's where it trains, else the
best-ranked of all its setups. Formats are
ordered narrowest first: fewest total bits (sign + exponent + mantissa), then fewest exponent bits. A format is safe
for training when its best setup's label is `safe` or `safe for training` (nothing failed, the parameter-gradient
roundoff at most WELL_UNDER times the gradient noise). An exponent width never overflows when no run of any format
with that many exponent bits failed with an overflow, whichever library, scaling or precision it ran with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ..axes.dtypes import DTYPES
from ..measuring.outcomes import FailureClass, Status
from . import verdict
from .answer import TRAINABLE, Answer, answers


@dataclass(frozen=True)
class FormatResult:
    """One format of the sweep, judged by its best setup."""

    dtype: str  # as the verdict labels it (`e5m4`, or `float16 emulated` in a sweep over the arithmetic axis)
    exponent_bits: int
    mantissa_bits: int
    judgement: verdict.SetupJudgement  # the best setup
    arithmetic: str  # "hardware" or "emulated", of the best setup's runs
    n_runs: int  # every run of the format that was not skipped, over all its setups
    n_overflows: int

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def trainable(self) -> bool:
        return self.judgement.label in TRAINABLE

    @property
    def to_noise(self) -> float | None:
        return self.judgement.to_noise.value if self.judgement.to_noise else None

    @property
    def width(self) -> tuple[int, int]:
        return self.bits, self.exponent_bits


@dataclass(frozen=True)
class ExponentWidth:
    """Every run of the formats with one exponent width."""

    exponent_bits: int
    formats: tuple[str, ...]
    n_runs: int
    n_overflows: int
    headroom: float | None  # the format's max over the largest finite adjoint of its runs without failure (smallest)

    @property
    def overflows(self) -> bool:
        return self.n_overflows > 0


def bit_layout(dtype: str) -> tuple[int, int] | None:
    """(exponent bits, mantissa bits) of a dtype label (`e5m4`, `float16`, `float16 emulated`); None if unknown."""
    name = str(dtype).split()[0]
    if name not in DTYPES:
        return None
    f = DTYPES.get(name).format
    return f.exponent_bits, f.mantissa_bits


def format_results(results: pd.DataFrame, judged: list[Answer] | None = None) -> list[FormatResult]:
    """Every format of the sweep whose bit layout is known, narrowest first (`judged`: the answers, if known)."""
    ran = verdict.with_format_labels(results[results["status"] != Status.SKIPPED])
    by_dtype = dict(tuple(ran.groupby("dtype", sort=False)))
    setups: dict[str, list[verdict.SetupJudgement]] = {}
    for v in verdict.verdicts(results):
        for j in v.setups:
            setups.setdefault(j.dtype, []).append(j)
    found = []
    for a in answers(results) if judged is None else judged:
        layout = bit_layout(a.dtype)
        if layout is None or a.dtype not in by_dtype:
            continue
        runs = by_dtype[a.dtype]
        # The answer's setup where it trains; otherwise the best of every setup (a scaled one that ran, say, rather
        # than the unscaled one that overflowed and decided the verdict).
        best = a.judgement if a.train else min(setups.get(a.dtype, [a.judgement]), key=verdict.rank)
        overflows = int(((runs["status"] == Status.FAILED) & (runs["failure_class"] == FailureClass.OVERFLOW)).sum())
        found.append(FormatResult(a.dtype, *layout, best, _arithmetic(runs, best), len(runs), overflows))
    return sorted(found, key=lambda f: f.width)


def _arithmetic(runs: pd.DataFrame, judgement: verdict.SetupJudgement) -> str:
    setup = runs[
        (runs["library"] == judgement.library)
        & (runs["scaling"] == judgement.scaling)
        & (runs["mode"] == judgement.mode)
    ]
    return "emulated" if "arithmetic" in setup and (setup["arithmetic"] == "emulated").any() else "hardware"


def emulated(found: list[FormatResult]) -> list[FormatResult]:
    return [f for f in found if f.arithmetic == "emulated"]


def narrowest_safe(found: list[FormatResult]) -> FormatResult | None:
    """The narrowest format safe for training (fewest bits, then fewest exponent bits; then the smaller roundoff)."""
    safe = [f for f in found if f.trainable]
    return min(safe, key=lambda f: (*f.width, f.to_noise if f.to_noise is not None else math.inf)) if safe else None


def narrower_unsafe(found: list[FormatResult], than: FormatResult) -> list[FormatResult]:
    """The formats narrower than `than` (fewer bits) that are not safe for training: what the search ruled out."""
    return [f for f in found if f.bits < than.bits and not f.trainable]


def exponent_widths(results: pd.DataFrame) -> list[ExponentWidth]:
    """Per exponent width of the swept formats, narrowest first: its runs, overflows and headroom."""
    ran = verdict.with_format_labels(results[results["status"] != Status.SKIPPED])
    layouts = {d: bit_layout(d) for d in ran["dtype"].unique()}
    widths: dict[int, list[str]] = {}
    for dtype, layout in layouts.items():
        if layout is not None:
            widths.setdefault(layout[0], []).append(dtype)
    found = []
    for bits in sorted(widths):
        runs = ran[ran["dtype"].isin(widths[bits])]
        overflows = int(((runs["status"] == Status.FAILED) & (runs["failure_class"] == FailureClass.OVERFLOW)).sum())
        found.append(ExponentWidth(bits, tuple(widths[bits]), len(runs), overflows, _headroom(runs)))
    return found


def _headroom(runs: pd.DataFrame) -> float | None:
    ok = runs[runs["status"] == Status.OK]
    if "max_abs_adjoint" not in ok or "dtype_max" not in ok:
        return None
    ratio = (ok["dtype_max"] / ok["max_abs_adjoint"]).replace([math.inf, -math.inf], math.nan).dropna()
    ratio = ratio[ratio > 0]
    return float(ratio.min()) if not ratio.empty else None


def narrowest_without_overflow(widths: list[ExponentWidth]) -> ExponentWidth | None:
    """The narrowest exponent width none of whose runs overflowed, where every wider width swept is free of it too."""
    clear = None
    for w in reversed(widths):
        if w.overflows:
            break
        clear = w
    return clear
