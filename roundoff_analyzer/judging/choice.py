"""The one setup the answer names first: of the dtypes safe for training, the one to train with. Pure functions of the
results table and the answers.

Preferred, in order: a dtype that ran with real hardware support (an emulated format is what it would do, not code to
train with today); then fewer total bits (float32 only when nothing narrower is safe for training); then the better
label (`safe` before `safe for training`); then the smaller parameter-gradient roundoff against the gradient noise,
then against nothing (its largest parameter-gradient roundoff). Two ratios to the noise within its uncertainty of each
other do not tell two setups apart: of those the simpler goes first (fewer modules kept in float32, then no scaling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from . import verdict
from .answer import Answer, answers
from .format_search import bit_layout

LOSS_PLACEMENT = "loss_in"  # where the loss is computed, where the sweep measured it (a column of newer tables)


@dataclass(frozen=True)
class Choice:
    answer: Answer  # the dtype and setup to train with
    bits: int | None
    runner_up: Answer | None  # the next best dtype safe for training, for the comparison
    float32_grad: float | None  # float32's smallest largest parameter-gradient roundoff, where float32 ran
    loss_in: str | None  # where the chosen setup formed its loss, where the sweep measured more than one placement


def choose(results: pd.DataFrame, found: list[Answer] | None = None) -> Choice | None:
    """The setup to train with, or None when no dtype is safe for training here (`found`: the answers, if known)."""
    found = answers(results) if found is None else found
    ranked = verdict.ranked_within_noise([a for a in found if a.train], _group, lambda a: a.judgement, _simpler)
    if not ranked:
        return None
    chosen = ranked[0]
    return Choice(
        chosen,
        _bits(chosen.dtype),
        ranked[1] if len(ranked) > 1 else None,
        _float32_grad(found),
        _loss_in(results, chosen),
    )


def _bits(dtype: str) -> int | None:
    layout = bit_layout(dtype)
    return 1 + sum(layout) if layout else None


def _group(a: Answer) -> tuple:
    bits = _bits(a.dtype)
    return (a.arithmetic == "emulated", bits if bits is not None else math.inf, verdict.RANK[a.judgement.label])


def _simpler(a: Answer) -> tuple:
    """Fewer modules kept in float32, then no scaling."""
    return (len(a.kept.value.split("+")) if a.kept is not None else 0, verdict.scaled(a.judgement))


def tied_by_noise(chosen: Answer, other: Answer) -> bool:
    """Whether `other`, the smaller roundoff against the noise, lies within the noise's uncertainty of `chosen`: the
    simpler `chosen` went first."""
    mine, theirs, u = chosen.judgement.to_noise, other.judgement.to_noise, chosen.judgement.noise_uncertainty
    if mine is None or theirs is None or u is None or _group(chosen) != _group(other):
        return False
    return theirs.value < mine.value <= theirs.value * (1 + u)


def _float32_grad(found: list[Answer]) -> float | None:
    float32 = [
        a.judgement.worst_grad for a in found if a.dtype.split()[0] == "float32" and a.judgement.worst_grad is not None
    ]
    return min(float32) if float32 else None


def _loss_in(results: pd.DataFrame, chosen: Answer) -> str | None:
    if LOSS_PLACEMENT not in results or results[LOSS_PLACEMENT].nunique() < 2:
        return None
    return chosen.loss_in
