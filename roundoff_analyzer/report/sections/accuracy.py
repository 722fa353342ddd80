"""The accuracy section: each setup's errors over n_timesteps, relative and in units of u, how the parameter-gradient
error grows with n_timesteps, the least accurate parameter gradients, and the error figures."""

from __future__ import annotations

import pandas as pd

from .. import formatting, seed_words, tables
from ..figure_data import ERROR_FIGURES, METRIC_NAMES
from ..findings import growths, sweep_timesteps, without_gradient, worst_parameters
from ..section_inputs import SectionInputs
from ..tableaux import tableau_notes


def section(inputs: SectionInputs) -> list[str]:
    return accuracy(inputs.results, inputs.sweep.param_errors, inputs.with_mode, inputs.figures)


WORST_PARAMETERS = 5  # rows per dtype in the table of least accurate parameter gradients


def accuracy(
    results: pd.DataFrame, param_errors: pd.DataFrame | None, with_mode: bool, figures: dict[str, tuple[str, str]]
) -> list[str]:
    timesteps = formatting.listing(sweep_timesteps(results))
    lines = [
        "## Accuracy",
        "",
        f"Each cell is the min – max over n_timesteps ({timesteps}){seed_words.over_seeds(results)} of the runs that "
        "produced a finite value, failed runs included (an overflow in the backward pass still leaves the solution "
        "error measured); `ok` counts the "
        f"runs without failure. {formatting.MISSING} means no run of that setup produced the value.",
        "",
        *(line for note in tableau_notes(results) for line in (note, "")),
        "### Relative error",
        "",
        tables.accuracy_table(results, in_units_of_u=False, with_mode=with_mode),
        "",
        "### In units of the unit roundoff u",
        "",
        f"The unit roundoff u of each dtype: {formatting.unit_roundoffs(results)}.",
        "",
        tables.accuracy_table(results, in_units_of_u=True, with_mode=with_mode),
    ]
    found = growths(results)
    if found:
        lines += [
            "",
            "### Parameter-gradient error from the smallest to the largest n_timesteps",
            "",
            "Over the n_timesteps at which each setup ran without failure; the ratio is largest n over smallest n"
            + ("; each initialisation's runs apart (its seed in the table)." if seed_words.several(results) else "."),
            "",
            tables.growth_table(results, found, with_mode),
        ]
    if param_errors is not None:
        worst = worst_parameters(param_errors, results, WORST_PARAMETERS)
        if not worst.empty:
            lines += [
                "",
                "### Least accurate parameter gradients",
                "",
                f"Per dtype, the {WORST_PARAMETERS} parameters with the largest gradient error over the runs without "
                f"failure{seed_words.over_initialisations(results, ', ')}, and a run where it was that large.",
                "",
                tables.worst_parameters_table(worst, with_mode, seed_words.several(results)),
            ]
        none = without_gradient(param_errors, results)
        if none:
            lines += [
                "",
                f"No gradient in either run, the float64 reference's nor the low dtype's (the loss does not depend on "
                f"{'it' if len(none) == 1 else 'them'}, so no error is measured): "
                f"{formatting.bounded_listing(f'`{name}`' for name in none)}.",
            ]
    shown = [name for name in ERROR_FIGURES if name in figures]
    if shown:
        lines += ["", "### Figures", ""]
        for name in shown:
            png, svg = figures[name]
            lines += [f"![{METRIC_NAMES[ERROR_FIGURES[name]]} error against n_timesteps]({png}) ([SVG]({svg}))", ""]
        lines.append(
            "One line per library × scaling; the dotted line is the unit roundoff u. A × marks a failed run: at its "
            "value where it has one, in the grey band at the top of the panel where it has none. Skipped "
            "configurations are not drawn."
        )
    return lines
