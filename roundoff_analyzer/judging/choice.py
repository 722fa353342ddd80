"""The one setup the answer names first: of the dtypes safe for training, the one to train with. Pure functions of the
results table and the answers.

Preferred, in order: a dtype that ran with real hardware support (an emulated format is what it would do, not code to
train with today); then fewer total bits (float32 only when nothing narrower is safe for training); then, within those,
the simplest setup (fewest changes to the user's code: no modules kept in float32 before some, no scaling before
scaling, the user's own library before another, no float32 part before one: simplicity.changes); then the better label
(`safe` before `safe for training`); then the smaller parameter-gradient roundoff against the gradient noise, then
against nothing (its largest parameter-gradient roundoff). A more complex setup goes first only where no simpler one
is safe for training; where one with more changes has the smaller roundoff, the answer says what the extra change
would buy (`Choice.lower`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from . import simplicity, verdict
from .answer import TRAINABLE, Answer, answers, simplest_first
from .format_search import bit_layout

LOSS_PLACEMENT = "loss_in"  # where the loss is computed, where the sweep measured it (a column of newer tables)


@dataclass(frozen=True)
class Alternative:
    """A setup safe for training other than the chosen one, with the modules it keeps in float32 (None: none)."""

    judgement: verdict.SetupJudgement
    kept: str | None


@dataclass(frozen=True)
class Choice:
    answer: Answer  # the dtype and setup to train with
    bits: int | None
    runner_up: Answer | None  # the next setup safe for training in the same order, for the comparison
    float32_grad: float | None  # float32's smallest largest parameter-gradient roundoff, where float32 ran
    loss_in: str | None  # where the chosen setup formed its loss, where the sweep measured more than one placement
    # A setup of the same dtype with more changes and a smaller roundoff against the noise, where one is safe for
    # training: what the extra change would buy, and why the answer does without it.
    lower: Alternative | None = None


def choose(results: pd.DataFrame, found: list[Answer] | None = None) -> Choice | None:
    """The setup to train with, or None when no dtype is safe for training here (`found`: the answers, if known)."""
    found = answers(results) if found is None else found
    ranked = sorted((a for a in found if a.train), key=lambda a: (_group(a), simplest_first(a.judgement, _kept(a))))
    if not ranked:
        return None
    chosen = ranked[0]
    return Choice(
        chosen,
        _bits(chosen.dtype),
        ranked[1] if len(ranked) > 1 else None,
        _float32_grad(found),
        _loss_in(results, chosen),
        _lower(results, chosen, found),
    )


def _bits(dtype: str) -> int | None:
    layout = bit_layout(dtype)
    return 1 + sum(layout) if layout else None


def _group(a: Answer) -> tuple:
    bits = _bits(a.dtype)
    return (a.arithmetic == "emulated", bits if bits is not None else math.inf)


def _kept(a: Answer) -> str | None:
    return a.kept.value if a.kept is not None else None


def _lower(results: pd.DataFrame, chosen: Answer, found: list[Answer]) -> Alternative | None:
    """Of the setups safe for training of the chosen one's dtype (every library, scaling, placement and kept part) with
    more changes, the one whose roundoff against the noise is the smallest, where it is smaller than the chosen one's
    by more than the noise's uncertainty: what the extra change would buy."""
    kept = {a.dtype: _kept(a) for a in found if a.train and _group(a) == _group(chosen)}
    setups = [
        Alternative(j, kept[j.dtype])
        for v in verdict.verdicts(results)
        if v.dtype in kept
        for j in v.setups
        if j.label in TRAINABLE
    ]
    changes = simplicity.changes(chosen.judgement, _kept(chosen))
    # Lower by less than the noise's uncertainty, another draw of the noise's batches could order the two otherwise:
    # the change buys nothing the sweep can tell.
    told = verdict.to_noise(chosen.judgement) / (1 + (chosen.judgement.noise_uncertainty or 0.0))
    lower = [
        s for s in setups if simplicity.changes(s.judgement, s.kept) > changes and verdict.to_noise(s.judgement) < told
    ]
    return min(lower, key=lambda s: verdict.to_noise(s.judgement)) if lower else None


def _float32_grad(found: list[Answer]) -> float | None:
    float32 = [
        a.judgement.worst_grad for a in found if a.dtype.split()[0] == "float32" and a.judgement.worst_grad is not None
    ]
    return min(float32) if float32 else None


def _loss_in(results: pd.DataFrame, chosen: Answer) -> str | None:
    if LOSS_PLACEMENT not in results or results[LOSS_PLACEMENT].nunique() < 2:
        return None
    return chosen.loss_in
