"""Several initialisations (the seed axis): each setup judged on each seed apart, beside its judgement on the worst.

The verdict judges a setup over all its runs, every seed's together, so that its label and its largest ratios are
the worst seed's. What each seed alone earned is kept here: the spread of the largest roundoff-to-noise ratio over
the initialisations, which the answer states, and whether the label differs between seeds, which it says first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class SeedSpread:
    """One setup judged on each seed's runs alone, in the order the sweep ran the seeds."""

    seeds: tuple[int, ...]
    labels: tuple[str, ...]  # each seed's label
    to_noise: tuple[float | None, ...]  # each seed's largest parameter-gradient roundoff over the gradient noise

    @property
    def differs(self) -> bool:
        """The label depends on the initialisation."""
        return len(set(self.labels)) > 1

    @property
    def noise_range(self) -> tuple[float, float] | None:
        """(smallest, largest) over the seeds of each one's largest roundoff-to-noise ratio; None where a seed has
        none measured (the range would leave it out)."""
        values = [v for v in self.to_noise if v is not None and math.isfinite(v)]
        if len(values) != len(self.seeds):
            return None
        return min(values), max(values)

    def judged_seed(self, label: str) -> int:
        """The seed the setup's `label` (the worst over the seeds) came from: of the seeds that earned it, the one with
        the largest roundoff-to-noise ratio (the first where none was measured)."""
        earned = [i for i, own in enumerate(self.labels) if own == label] or list(range(len(self.seeds)))
        ratio = lambda i: v if (v := self.to_noise[i]) is not None and math.isfinite(v) else -math.inf  # noqa: E731
        return self.seeds[max(earned, key=ratio)]

    def seeds_labelled(self) -> list[tuple[str, tuple[int, ...]]]:
        """(label, its seeds) for each label earned, in the order first met."""
        found: dict[str, list[int]] = {}
        for seed, label in zip(self.seeds, self.labels, strict=True):
            found.setdefault(label, []).append(seed)
        return [(label, tuple(seeds)) for label, seeds in found.items()]


def seeds_of(runs: pd.DataFrame) -> list[int]:
    """The seeds of `runs` in the order met: several only in a sweep over the seed axis."""
    if "seed" not in runs or runs["seed"].isna().all():
        return []
    return [int(s) for s in dict.fromkeys(runs["seed"].dropna())]


def several_seeds(runs: pd.DataFrame) -> bool:
    """Whether `runs` span several initialisations (the seed axis)."""
    return len(seeds_of(runs)) > 1


def by_seed(runs: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """Each seed's runs, where `runs` holds several seeds; else nothing."""
    seeds = seeds_of(runs)
    return [(seed, runs[runs["seed"] == seed]) for seed in seeds] if len(seeds) > 1 else []
