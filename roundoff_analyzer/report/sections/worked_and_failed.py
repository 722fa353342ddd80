"""The last section: every setup by outcome (worked at every n_timesteps, at some, failed, skipped)."""

from __future__ import annotations

import pandas as pd

from .. import formatting
from ..findings import setup_outcomes, sweep_timesteps
from ..section_inputs import SectionInputs


def section(inputs: SectionInputs) -> list[str]:
    return worked_and_failed(inputs.results, inputs.with_mode)


def worked_and_failed(results: pd.DataFrame, with_mode: bool) -> list[str]:
    every_n = sweep_timesteps(results)
    worked, partly, failed, skipped = [], [], [], []
    for o in setup_outcomes(results):
        label = formatting.setup_label(o.setup, with_mode)
        by_class = {c: [n for n, k in o.failed if k == c] for _, c in o.failed}
        failures = "; ".join(f"{c} at n = {formatting.listing(ns)}" for c, ns in by_class.items())
        if o.skipped and not o.ok and not o.failed:
            skipped.append(f"{label}: {formatting.listing(o.skip_reasons)}")
        elif o.ok and not o.failed:
            worked.append(label + ("" if list(o.ok) == every_n else f" (at n = {formatting.listing(o.ok)})"))
        elif o.ok:
            partly.append(f"{label}: ran at n = {formatting.listing(o.ok)}; {failures}")
        else:
            failed.append(f"{label}: {failures}")
    lines = ["## What worked and what failed"]
    for title, items in (
        (f"Worked at every n_timesteps ({formatting.listing(every_n)})", worked),
        ("Worked at some n_timesteps", partly),
        ("Failed at every n_timesteps it ran", failed),
        ("Skipped", skipped),
    ):
        if items:
            lines += ["", f"### {title}", ""] + [f"- {item}" for item in formatting.bounded_items(items, "more setups")]
    return lines
