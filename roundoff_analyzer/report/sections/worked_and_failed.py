"""The last section: every setup by outcome (worked at every n_timesteps, at some, failed, skipped)."""

from __future__ import annotations

import pandas as pd

from ...judging.seeds import seeds_of
from .. import formatting
from ..findings import setup_outcomes, sweep_timesteps
from ..section_inputs import SectionInputs
from ..seed_words import seeds_named


def section(inputs: SectionInputs) -> list[str]:
    return worked_and_failed(inputs.results, inputs.with_mode)


def worked_and_failed(results: pd.DataFrame, with_mode: bool) -> list[str]:
    every_n = sweep_timesteps(results)
    seeds = seeds_of(results)
    # (heading, line) -> the seeds it holds for: over several initialisations each seed's runs are read apart, and a
    # line that holds for several is said once with its seeds.
    found: dict[tuple[str, str], list[int | None]] = {}
    for o in setup_outcomes(results):
        label = formatting.setup_label(o.setup, with_mode)
        by_class = {c: [n for n, k in o.failed if k == c] for _, c in o.failed}
        failures = "; ".join(f"{c} at n = {formatting.listing(ns)}" for c, ns in by_class.items())
        if o.skipped and not o.ok and not o.failed:
            item = (SKIPPED, f"{label}: {formatting.listing(o.skip_reasons)}")
        elif o.ok and not o.failed:
            item = (WORKED, label + ("" if list(o.ok) == every_n else f" (at n = {formatting.listing(o.ok)})"))
        elif o.ok:
            item = (PARTLY, f"{label}: ran at n = {formatting.listing(o.ok)}; {failures}")
        else:
            item = (FAILED, f"{label}: {failures}")
        found.setdefault(item, []).append(o.seed)
    lines = ["## What worked and what failed"]
    for heading in (WORKED, PARTLY, FAILED, SKIPPED):
        items = [line + _on_seeds(held, seeds) for (h, line), held in found.items() if h == heading]
        if items:
            title = f"{heading} ({formatting.listing(every_n)})" if heading == WORKED else heading
            lines += ["", f"### {title}", ""] + [f"- {item}" for item in formatting.bounded_items(items, "more setups")]
    return lines


WORKED, PARTLY = "Worked at every n_timesteps", "Worked at some n_timesteps"
FAILED, SKIPPED = "Failed at every n_timesteps it ran", "Skipped"


def _on_seeds(held: list[int | None], seeds: list[int]) -> str:
    """' (on seeds 0 and 2)' where a line holds for some of several initialisations, ' (on every seed)' for all."""
    if len(seeds) < 2:
        return ""
    return " (on every seed)" if len(held) == len(seeds) else f" (on {seeds_named(s for s in held if s is not None)})"
