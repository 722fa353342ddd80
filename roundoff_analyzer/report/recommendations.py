"""The recommendations section: only what the numbers support, each with the numbers that support it."""
from __future__ import annotations

import pandas as pd

from . import formatting as fmt
from .eight_bit import eight_bit_verdicts
from .findings import SETUP_COLUMNS, contrasts, growths, most_accurate, rescues


def recommendations(results: pd.DataFrame, with_mode: bool) -> list[str]:
    items = best_per_dtype(results, with_mode) + scaling_needed(results, with_mode) + growth_contrasts(results, with_mode)
    items += eight_bit_verdicts(results, with_mode)
    if not items:
        return []
    return ["## Recommendations", ""] + [f"- {item}" for item in items]


def best_per_dtype(results: pd.DataFrame, with_mode: bool) -> list[str]:
    items = []
    for dtype, best in most_accurate(results).items():
        if best is None:
            items.append(f"**{dtype}**: no setup ran without failure at every n_timesteps, so none is recommended.")
            continue
        setups = fmt.setups_label(best.setups, with_mode)
        tie = " (tied within 1%)" if len(best.setups) > 1 else ""
        in_u = f" ({fmt.in_u(best.worst_over_u)} u)" if best.worst_over_u is not None else ""
        items.append(
            f"**{dtype}**: the most accurate setup that ran at every n_timesteps is {setups}{tie}: its parameter-gradient "
            f"error is at most {fmt.error(best.worst)}{in_u}."
        )
    return items


def scaling_needed(results: pd.DataFrame, with_mode: bool) -> list[str]:
    items = []
    found = rescues(results)
    for dtype in dict.fromkeys(r.dtype for r in found):
        places = []
        for r in (r for r in found if r.dtype == dtype):
            mode = f" ({r.mode})" if with_mode else ""
            fix = f"{fmt.either([f'`{s}`' for s in r.rescued_by])} worked there" if r.rescued_by else "no scaling in this sweep worked there"
            places.append(f"{r.library} {r.method}{mode} at n = {fmt.listing(n for n, _ in r.failed_without)} ({fix})")
        items.append(f"**{dtype} needs scaling** where it failed without it: {'; '.join(places)}.")
    unscaled = results[(results["scaling"] == "none") & (results["status"] != "skipped")]
    for dtype, runs in unscaled.groupby("dtype", sort=False):
        if (runs["status"] == "ok").all() and dtype not in {r.dtype for r in found}:
            items.append(
                f"**{dtype} without scaling** ran at every n_timesteps with every library and method it was run with: "
                "this sweep gives no reason to scale it."
            )
    return items


def growth_contrasts(results: pd.DataFrame, with_mode: bool) -> list[str]:
    items = []
    for c in contrasts(growths(results)):
        named = dict(zip(SETUP_COLUMNS, c.grows.setup))
        mode = f", {named['mode']}" if with_mode else ""
        g, f = c.grows, c.flat
        items.append(
            f"**Error growth with n_timesteps** ({named['method']}, {named['dtype']}, scaling {named['scaling']}{mode}): "
            f"{g.setup[0]}'s parameter-gradient error grows from {fmt.error(g.values[0])} at n = {g.timesteps[0]} to "
            f"{fmt.error(g.values[-1])} at n = {g.timesteps[-1]} ({fmt.in_u(g.factor)}×), while {f.setup[0]}'s stays within "
            f"{fmt.value_range(f.values, fmt.error)}: at the larger n_timesteps of this sweep, prefer {f.setup[0]}."
        )
    return items
