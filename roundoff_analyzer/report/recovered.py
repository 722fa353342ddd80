"""Runs that ended `ok` although some backward step's adjoint overflowed the low dtype: where, and why they count."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..measuring.outcomes import Status
from . import formatting
from .figure_data import non_finite_steps, with_run_status
from .findings import SETUP_COLUMNS, seed_of
from .seed_words import of_seed, several


@dataclass(frozen=True)
class Recovered:
    setup: tuple  # SETUP_COLUMNS' values
    n_timesteps: int
    steps: tuple[int, ...]  # the backward steps whose low-dtype adjoint was not finite
    of_steps: int  # the backward steps recorded
    scale: float | None  # the loss or adjoint scale the run ended with (grad, dynamic)
    seed: int | None = None  # where the sweep ran several initialisations


def recovered_overflows(profile: pd.DataFrame | None, results: pd.DataFrame) -> list[Recovered]:
    if profile is None or profile.empty:
        return []
    backward = with_run_status(profile[profile["phase"] == "backward"], results)
    backward = backward.assign(broken=non_finite_steps(backward))
    found = []
    seeded = ["seed"] if several(results) and "seed" in backward else []
    columns = [*SETUP_COLUMNS, "n_timesteps", *seeded]
    for key, steps in backward[backward["status"] == Status.OK].groupby(columns, sort=False, dropna=False):
        broken = steps.loc[steps["broken"], "step"]
        if broken.empty:
            continue
        setup, n = key[: len(SETUP_COLUMNS)], key[len(SETUP_COLUMNS)]
        run = results[(results[columns] == list(key)).all(axis=1)]
        scale = run["final_scale"].dropna() if "final_scale" in run else pd.Series(dtype=float)
        found.append(
            Recovered(
                tuple(setup),
                int(n),
                tuple(sorted(int(s) for s in broken)),
                int(steps["step"].nunique()),
                float(scale.iloc[0]) if not scale.empty else None,
                seed_of(key, results) if seeded else None,
            )
        )
    return found


def spans(steps: tuple[int, ...]) -> str:
    """0, 1, 2, 5, 7, 8 -> '0–2, 5, 7–8'."""
    parts, start = [], None
    for i, step in enumerate(steps):
        if start is None:
            start = step
        if i + 1 == len(steps) or steps[i + 1] != step + 1:
            parts.append(str(start) if start == step else f"{start}–{step}")
            start = None
    return ", ".join(parts)


def recovered_paragraph(profile: pd.DataFrame | None, results: pd.DataFrame, with_mode: bool) -> list[str]:
    found = recovered_overflows(profile, results)
    if not found:
        return []
    items = []
    for r in found:
        scale = f", at scale {r.scale:g}" if r.scale is not None else ""
        items.append(
            f"- {formatting.setup_label(r.setup, with_mode)} at n = {r.n_timesteps}{of_seed(r.seed)}: backward "
            f"{'step' if len(r.steps) == 1 else 'steps'} {spans(r.steps)} ({len(r.steps)} of {r.of_steps}{scale})"
        )
    return [
        f"**Overflows the runs recovered from.** In {formatting.plural(len(found), 'run')} without failure the "
        "adjoint, "
        "multiplied by the loss or adjoint scale in effect and cast to the low dtype, was not finite at some "
        "backward steps (○ in the figures of the adjoint's range):",
        "",
        *items,
        "",
        "They still count as `ok`: their solution, loss and gradients came out finite and are measured against the "
        "float64 reference like every other run. What overflowed was the copy of the adjoint in the low dtype; "
        "where the model's increment is wider than the low dtype (an operation such as `torch.cat` with a float32 "
        "input promotes it to float32) the backward's product takes the wider adjoint, and a scaler that saw a "
        "non-finite product redid the step at a smaller scale, so the overflow never reached the gradients. A "
        "larger scale makes this more likely: `grad`'s loss scale multiplies every adjoint.",
    ]
