"""Whether an 8-bit format is usable for the swept model, and with which scaling: from the runs alone.

Usable here means: some setup ran without failure at every n_timesteps, and its parameter-gradient
error stays below 0.1, so the gradient keeps at least one correct digit.
"""

from __future__ import annotations

import pandas as pd

from ..axes.dtypes import DTYPES
from ..measuring.outcomes import Status
from . import formatting, seed_words
from .findings import most_accurate

ONE_DIGIT = 0.1
EIGHT_BITS = 8


def eight_bit_verdicts(results: pd.DataFrame, with_mode: bool) -> list[str]:
    narrow = [d for d in results["dtype"].unique() if d in DTYPES and DTYPES.get(d).bits <= EIGHT_BITS]
    best = most_accurate(results[results["dtype"].isin(narrow)]) if narrow else {}
    return [_verdict(dtype, results[results["dtype"] == dtype], best.get(dtype), with_mode) for dtype in narrow]


def _verdict(dtype: str, runs: pd.DataFrame, best, with_mode: bool) -> str:
    ran = runs[runs["status"] != Status.SKIPPED]
    ok = ran[ran["status"] == Status.OK]
    u = float(runs["unit_roundoff"].iloc[0])
    scaled = runs["fp8_scaling"].dropna().unique() if "fp8_scaling" in runs.columns else []
    tensor_scaling = ", per-tensor fp8 scaling " + ("on" if all(scaled) else "off") if len(scaled) else ""
    head = (
        f"**8-bit {dtype}** (u = {formatting.error(u)}{tensor_scaling}): {len(ok)} of {len(ran)} configurations ran "
        "without "
        f"failure{seed_words.over_initialisations(runs, ', ')}"
    )
    if len(ok) < len(ran):
        classes = ran.loc[ran["status"] == Status.FAILED, "failure_class"].value_counts()
        head += f" (failed: {', '.join(f'{c} {n}' for c, n in classes.items())})"
    if best is None:
        return f"{head}; no setup ran at every n_timesteps: not usable for this model as run here."
    setups = formatting.setups_label(best.setups, with_mode)
    worst = (
        f"at most {formatting.error(best.worst)}"
        + (f" ({formatting.in_u(best.worst_over_u)} u)" if best.worst_over_u is not None else "")
        + seed_words.of_seed(best.seed, " on ")
    )
    if best.worst < ONE_DIGIT:
        return (
            f"{head}; with {setups} its parameter-gradient error is {worst} at every n_timesteps: usable (at least "
            "one correct digit)."
        )
    return (
        f"{head}; its best setup, {setups}, reaches a parameter-gradient error {worst}: no correct digit left, not "
        "usable."
    )
