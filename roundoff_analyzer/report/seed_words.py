"""The words of a sweep over several initialisations (the seed axis): each setup's spread over the seeds, and, first
in the answer, where its verdict differs between them (judging/seeds.py)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..judging import verdict
from ..judging.seeds import seeds_of, several_seeds
from . import formatting

several = several_seeds  # the report's name for it: the sections ask `seed_words.several(results)`


def spread_words(j: verdict.SetupJudgement) -> str:
    """'; 0.0071–0.012× the noise over 3 initialisations' where the setup ran on several seeds; else nothing."""
    spread = j.seeds
    if spread is None:
        return ""
    found = spread.noise_range
    if found is None:
        return f"; over {len(spread.seeds)} initialisations"
    return f"; {formatting.value_range(found, formatting.in_u)}× the noise over {len(spread.seeds)} initialisations"


def labels_by_seed(j: verdict.SetupJudgement) -> str:
    """'safe for training on seeds 0 and 2, borderline on seed 1'."""
    assert j.seeds is not None
    return ", ".join(f"{label} on {seeds_named(seeds)}" for label, seeds in j.seeds.seeds_labelled())


def seeds_named(seeds: Iterable[int]) -> str:
    """'seed 1', 'seeds 0 and 2', 'seeds 0, 2 and 5'."""
    names = [str(s) for s in seeds]
    if len(names) == 1:
        return f"seed {names[0]}"
    return f"seeds {', '.join(names[:-1])} and {names[-1]}"


def differs_first(judgements: Iterable[tuple[str, verdict.SetupJudgement]]) -> str:
    """'**The verdict differs between initialisations**: float16 with native, no scaling is safe for training on seeds
    0 and 2, borderline on seed 1; each setup is judged on its worst seed. ', for the (name, judgement) pairs whose
    label depends on the seed; else nothing."""
    differing = [(name, j) for name, j in judgements if j.seeds is not None and j.seeds.differs]
    if not differing:
        return ""
    said = "; ".join(f"{name} is {labels_by_seed(j)}" for name, j in differing)
    return f"**The verdict differs between initialisations**: {said}; each setup is judged on its worst seed. "


def judged_on_seeds(seeds: list[int]) -> str:
    """'the initial weights of 3 initialisations (seeds 0, 1 and 2, untrained; each setup on its worst)'."""
    return (
        f"the initial weights of {len(seeds)} initialisations ({seeds_named(seeds)}, untrained; each setup on its "
        "worst)"
    )


def noise_value(results: pd.DataFrame, noise: pd.Series) -> str:
    """The gradient noise the rows record: '0.0736', or over several seeds, each with its own noise, '0.0736 – 0.081
    (each of the 2 initialisations its own)'."""
    seeds = seeds_of(results)
    if len(seeds) < 2:
        return formatting.in_u(noise.iloc[0])
    each = results.loc[noise.index].groupby("seed")["grad_noise_rel"].first()
    return f"{formatting.value_range(each, formatting.in_u)} (each of the {len(seeds)} initialisations its own)"


def over_seeds(results: pd.DataFrame) -> str:
    """' and seeds (0, 1, 2)' where the rows span several seeds, for the sentences that say what a range is over."""
    seeds = seeds_of(results)
    return f" and seeds ({formatting.listing(seeds)})" if len(seeds) > 1 else ""


def grid_columns(results: pd.DataFrame, columns: list[str]) -> list[str]:
    """`columns` that fix a time grid's float64 runs, with `seed` where the rows span several: each seed has its own
    references, so its own discretisation error."""
    return [*columns, "seed"] if several_seeds(results) else columns


def timed_on(seed: int | None, lead: str = "") -> str:
    """'timed on seed 5's initialisation', after `lead`, where the sweep ran several and the timing pass timed one;
    else nothing."""
    return f"{lead}timed on seed {seed}'s initialisation" if seed is not None else ""


def seed_cell(row: pd.Series | dict, several: bool) -> list[str]:
    """A table row's seed cell where the table spans several initialisations; else no cell."""
    return [str(int(row["seed"]))] if several else []


def of_seed(seed: int | None, lead: str = ", ") -> str:
    """', seed 5' after a configuration's words, where the rows span several initialisations (`seed` None: one)."""
    return f"{lead}seed {seed}" if seed is not None else ""


def of_seeds(seeds: Iterable[int], lead: str = ", ") -> str:
    """', seed 5' for one seed's runs; ', seeds 0, 1 and 2, each its own' for ratios taken within each of several
    (never across them); nothing where the rows span one initialisation (no seed given)."""
    seeds = list(seeds)
    if len(seeds) < 2:
        return of_seed(seeds[0] if seeds else None, lead)
    return f"{lead}{seeds_named(seeds)}, each its own"


def over_initialisations(results: pd.DataFrame, lead: str = " ") -> str:
    """' over 3 initialisations' where a range spans the seeds; else nothing."""
    seeds = seeds_of(results)
    return f"{lead}over {len(seeds)} initialisations" if len(seeds) > 1 else ""
