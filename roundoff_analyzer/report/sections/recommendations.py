"""The recommendations section: only what the numbers support, each with the numbers that support it.

Advice weighs accuracy as well as failures: a scaling that cuts the error tenfold is recommended even where
nothing failed, and a method is preferred on its total error (discretisation + roundoff), never on roundoff alone.
"""

from __future__ import annotations

import pandas as pd

from ...axes import scalings
from ...judging import verdict
from ...measuring.outcomes import Status
from .. import formatting, seed_words
from ..eight_bit import eight_bit_verdicts
from ..findings import GROWS, SETUP_COLUMNS, by_seed, contrasts, growths, most_accurate, rescues
from ..section_inputs import SectionInputs

TOTAL = "total_grad_params_rel_err"


def section(inputs: SectionInputs) -> list[str]:
    return recommendations(inputs.results, inputs.with_mode)


def recommendations(results: pd.DataFrame, with_mode: bool) -> list[str]:
    # A setup keeping modules in float32 is a dtype of its own here, as in the answer: never mixed with the same setup
    # keeping nothing.
    results = verdict.kept_as_dtypes(results)
    items = (
        scaling_needed(results, with_mode)
        + scaling_that_pays(results, with_mode)
        + method_advice(results)
        + best_per_dtype(results, with_mode)
        + growth_contrasts(results, with_mode)
        + weight_cache(results)
    )
    items += eight_bit_verdicts(results, with_mode)
    if not items:
        return []
    return ["## Recommendations", ""] + [
        f"- {item}" for item in formatting.bounded_items(items, "more recommendations")
    ]


def _has_total(results: pd.DataFrame) -> bool:
    return TOTAL in results and results.loc[results["status"] == Status.OK, TOTAL].notna().any()


def best_per_dtype(results: pd.DataFrame, with_mode: bool) -> list[str]:
    total = _has_total(results)
    metric = TOTAL if total else "grad_params_rel_err"
    what = (
        "total parameter-gradient error (against the fine reference: discretisation and roundoff)"
        if total
        else "parameter-gradient error"
    )
    items = []
    every = " on every initialisation" if seed_words.several(results) else ""
    for dtype, best in most_accurate(results, metric).items():
        if best is None:
            items.append(
                f"**{dtype}**: no setup ran without failure at every n_timesteps{every}, so none is recommended."
            )
            continue
        setups = formatting.setups_label(best.setups, with_mode)
        tie = " (tied within 1%)" if len(best.setups) > 1 else ""
        in_u = f" ({formatting.in_u(best.worst_over_u)} u)" if best.worst_over_u is not None else ""
        items.append(
            f"**{dtype}**: the most accurate setup that ran at every n_timesteps{every} is {setups}{tie}: its {what} "
            f"is at most {formatting.error(best.worst)}{in_u}{seed_words.of_seed(best.seed, ' on ')}"
            f"{_computes_nothing_low(results, dtype)}."
        )
    return items


def _computes_nothing_low(results: pd.DataFrame, dtype: str) -> str:
    """Where the runs of a dtype keeping modules in float32 computed nothing in the low dtype, it says so (the answer
    does not call it a setup of that dtype)."""
    runs = results[results["dtype"] == dtype]
    low = runs["low_dtype_op_share"].dropna() if "low_dtype_op_share" in runs else runs.iloc[0:0]
    if low.empty or (low > 0).any():
        return ""
    low_dtype = dtype.split()[0]
    return f"; its kept part leaves no operation in {low_dtype}: it is float32 arithmetic, not a {low_dtype} setup"


def scaling_needed(results: pd.DataFrame, with_mode: bool) -> list[str]:
    items = []
    found = rescues(results)
    for dtype in dict.fromkeys(r.dtype for r in found):
        places = []
        for r in (r for r in found if r.dtype == dtype):
            mode = f" ({r.mode})" if with_mode else ""
            fix = (
                f"{formatting.either([f'`{s}`' for s in r.rescued_by])} worked there"
                if r.rescued_by
                else "no scaling in this sweep worked there"
            )
            places.append(
                f"{r.library} {r.method}{mode}{seed_words.of_seed(r.seed, ' on ')} at n = "
                f"{formatting.listing(n for n, _ in r.failed_without)} ({fix})"
            )
        items.append(f"**{dtype} needs scaling** where it failed without it: {'; '.join(places)}.")
    cut = {(u.dtype, u.mode) for u, _, _ in verdict.strong_cuts(results)}
    unscaled = results[scalings.unscaled(results["scaling"]) & (results["status"] != Status.SKIPPED)]
    for (dtype, mode), runs in unscaled.groupby(["dtype", "mode"], sort=False):
        if not (runs["status"] == Status.OK).all() or dtype in {r.dtype for r in found} or (dtype, mode) in cut:
            continue
        scaled = results[
            (results["dtype"] == dtype)
            & (results["mode"] == mode)
            & ~scalings.unscaled(results["scaling"])
            & (results["status"] == Status.OK)
        ]
        mode_text = f" ({mode})" if with_mode else ""
        if scaled.empty:
            tail = "this sweep ran no scaling strategy to compare it with."
        else:
            tail = (
                f"no scaling strategy of this sweep ({formatting.listing(scaled['scaling'].unique())}) cut its "
                f"parameter-gradient error {verdict.CUTS:g}× or more."
            )
        every = " on every initialisation" if seed_words.several(results) else ""
        items.append(
            f"**{dtype} without scaling**{mode_text} ran at every n_timesteps with every library and method it was "
            f"run with{every}, and {tail}"
        )
    return items


def scaling_that_pays(results: pd.DataFrame, with_mode: bool) -> list[str]:
    """A scaling that cut the largest parameter-gradient error by CUTS or more, whether or not anything failed."""
    items = []
    each = f" (each the largest{seed_words.over_initialisations(results)})" if seed_words.several(results) else ""
    for unscaled, scaled, factor in verdict.strong_cuts(results):
        mode = f" ({scaled.mode})" if with_mode else ""
        failed = " (which also failed without it)" if unscaled.failures else ", although nothing failed without it"
        items.append(
            f"**{scaled.dtype} with {scaled.library}{mode}: use `{scaled.scaling}` scaling.** It cut the largest "
            f"parameter-gradient error {formatting.in_u(factor)}×, from {formatting.error(unscaled.worst_grad)} to "
            f"{formatting.error(scaled.worst_grad)}{each}{failed}."
        )
    return items


def method_advice(results: pd.DataFrame) -> list[str]:
    """Per dtype, the method whose total error is smaller in every pair of runs that differ only in the method."""
    if not _has_total(results) or results["method"].nunique() < 2:
        return []
    items = []
    ok = results[(results["status"] == Status.OK) & results[TOTAL].notna()]
    others = [c for c in SETUP_COLUMNS if c != "method"] + ["n_timesteps"] + by_seed(results)
    for dtype, runs in ok.groupby("dtype", sort=False):
        wins: dict[str, int] = {}
        pairs = 0
        for _, group in runs.groupby(others, sort=False):
            if group["method"].nunique() < 2:
                continue
            pairs += 1
            winner = group.loc[group[TOTAL].idxmin(), "method"]
            wins[winner] = wins.get(winner, 0) + 1
        if pairs and len(wins) == 1:
            (best,) = wins
            rest = [m for m in runs["method"].unique() if m != best]
            spans = "; ".join(
                f"{m} {formatting.value_range(runs.loc[runs['method'] == m, TOTAL], formatting.error)}"
                for m in [best, *rest]
            )
            items.append(
                f"**Method ({dtype})**: prefer {best}. Its total parameter-gradient error (discretisation and "
                f"roundoff, against the fine reference) is the smallest in each of the {pairs} pairs of runs that "
                f"differ only in the method; over all runs without failure"
                f"{seed_words.over_initialisations(results, ', ')}: {spans}."
            )
    return items


def growth_contrasts(results: pd.DataFrame, with_mode: bool) -> list[str]:
    """One sentence per (method, dtype, mode, growing library, flat library), its scalings together."""
    grouped: dict[tuple, list] = {}
    for c in contrasts(growths(results)):
        named = dict(zip(SETUP_COLUMNS, c.grows.setup))
        key = (named["method"], named["dtype"], named["mode"], c.grows.setup[0], c.flat.setup[0])
        grouped.setdefault(key, []).append(c)
    items = []
    for (method, dtype, mode, grows, flat), found in grouped.items():
        scalings = formatting.either(
            list(dict.fromkeys(dict(zip(SETUP_COLUMNS, c.grows.setup))["scaling"] for c in found))
        )
        mode_text = f", {mode}" if with_mode else ""
        mode_text += seed_words.of_seeds(dict.fromkeys(c.grows.seed for c in found if c.grows.seed is not None))
        g = found[0].grows
        items.append(
            f"**Error growth with n_timesteps** ({method}, {dtype}, scaling {scalings}{mode_text}): {grows}'s "
            "parameter-gradient error grows "
            f"{formatting.value_range([c.grows.factor for c in found], formatting.in_u)}× from n = "
            f"{g.timesteps[0]} to n = {g.timesteps[-1]} (to "
            f"{formatting.value_range([c.grows.values[-1] for c in found], formatting.error)}), while {flat}'s stays "
            "within "
            f"{formatting.value_range([v for c in found for v in c.flat.values], formatting.error)}: at the larger "
            "n_timesteps of "
            f"this sweep, prefer {flat}."
        )
    return items


# Autocast keeps one low-precision copy of each weight for the whole solve and sums its gradient over every step in
# the low dtype: libraries that take autograd through the steps show it as error growing with n_timesteps.
CACHED, UNCACHED = "autocast", "autocast-nocache"


def weight_cache(results: pd.DataFrame) -> list[str]:
    """Where autocast's weight cache makes the gradient error grow with n_timesteps: one sentence per library."""
    by_setup = {(g.setup, g.seed): g for g in growths(results)}
    mode_at = SETUP_COLUMNS.index("mode")
    confirmed: dict[str, list] = {}
    suspected: dict[str, list] = {}
    for (setup, seed), cached in by_setup.items():
        library = setup[0]
        if setup[mode_at] != CACHED or cached.factor < GROWS:
            continue
        uncached = by_setup.get(((*setup[:mode_at], UNCACHED, *setup[mode_at + 1 :]), seed))
        if uncached is not None and uncached.timesteps == cached.timesteps and cached.factor >= 2 * uncached.factor:
            confirmed.setdefault(library, []).append((cached, uncached))
        elif (
            uncached is None
            and not (results["mode"] == UNCACHED).any()
            and not formatting.library_member(library, "native_solver")
        ):
            # (the native solver, either trajectory, sums the parameter gradient in float32 step by step: a growth
            # with n_timesteps there is not autocast's weight cache)
            suspected.setdefault(library, []).append(cached)
    items = []
    over = seed_words.over_initialisations(results, ", ")
    for library, pairs in confirmed.items():
        items.append(
            f"**Autocast's weight cache** ({library}, {_setups_phrase([c for c, _ in pairs])}{over}): the "
            f"parameter-gradient error grows {formatting.value_range([c.factor for c, _ in pairs], formatting.in_u)}× "
            "from the "
            "smallest to the largest n_timesteps under `autocast` and "
            f"{formatting.value_range([u.factor for _, u in pairs], formatting.in_u)}× with the cache off: pass "
            "`cache_enabled=False` to `torch.autocast` around the solve."
        )
    for library, found in suspected.items():
        items.append(
            f"**Autocast's weight cache?** ({library}, {_setups_phrase(found)}{over}): the parameter-gradient error "
            "grows "
            f"{formatting.value_range([g.factor for g in found], formatting.in_u)}× from the smallest to the largest "
            "n_timesteps; "
            f"if it is the cache's low-precision sum over the steps, `--mode autocast,{UNCACHED}` shows it."
        )
    return items


def _setups_phrase(found: list) -> str:
    named = [dict(zip(SETUP_COLUMNS, g.setup)) for g in found]
    return " and ".join(
        f"{key} {formatting.either(list(dict.fromkeys(n[key] for n in named)))}"
        for key in ("method", "dtype", "scaling")
    )
