"""The report as markdown: the sections in order; every sentence is worded from a finding or a table of the results."""
from __future__ import annotations

import pandas as pd

from ..core.version import __version__
from ..judging.environments import mixed_environments
from . import formatting as fmt
from . import tables
from .along_training import along_training_section, judged_rows, scope_note
from .answer_section import answer_section
from .context_section import context_section, cost_section
from .figures import ADJOINT_FIGURE, ERROR_FIGURES, METRIC_NAMES
from .findings import growths, setup_outcomes, sweep_timesteps, worst_parameters
from .key_findings import key_findings
from .modules_section import modules_section
from .overview import overview
from .placements import placements_as_modes
from .recommendations import recommendations
from .sweep_folder import SweepFolder
from .tableaux import tableau_notes
from .verdict_section import verdict_section


def render(sweep: SweepFolder, figures: dict[str, tuple[str, str]]) -> str:
    """The whole report; `figures` maps a figure's name to its PNG and SVG paths relative to the report."""
    every_checkpoint, note = sweep.results, scope_note(sweep.results)
    sweep, _ = judged_rows(sweep)
    judged = sweep.results
    # The answer and the verdict judge each loss placement from its column; the detail reads it as a mode.
    results = placements_as_modes(judged)
    with_mode = results["mode"].nunique() > 1
    model = (sweep.manifest.get("model") or {}).get("name") or fmt.listing(results["model"].unique())
    lines = [
        f"# Roundoff report: {model}",
        "",
        f"Written by roundoff-analyzer {__version__} from `{sweep.path.name}/results.parquet`. Every number in it is read "
        "from that table; errors are relative to a float64 reference solved by the same library on the same time grid.",
        "",
    ]
    if note:
        lines += [note, ""]
    mixed = mixed_environments(every_checkpoint)
    if mixed:
        lines += [f"**Mixed environments:** {mixed[:1].upper()}{mixed[1:]}.", ""]
    # What a reader acts on comes first; the detail that backs it follows.
    sections = (
        answer_section(judged, sweep.manifest.get("device"), sweep.manifest, figures),
        verdict_section(judged),
        key_findings(results, sweep.manifest, with_mode, sweep.profile),
        modules_section(results, sweep.modules),
        along_training_section(every_checkpoint, sweep.manifest, figures, sweep.path),
        recommendations(results, with_mode),
        context_section(results),
        cost_section(results),
        overview(sweep),
        accuracy(results, sweep.param_errors, with_mode, figures),
        adjoint_range(figures),
        worked_and_failed(results, with_mode),
    )
    for section in sections:
        if section:
            lines += section + [""]
    return "\n".join(lines).rstrip() + "\n"


# --- accuracy ---------------------------------------------------------------------------------------------------------

WORST_PARAMETERS = 5  # rows per dtype in the table of least accurate parameter gradients


def accuracy(
    results: pd.DataFrame, param_errors: pd.DataFrame | None, with_mode: bool, figures: dict[str, tuple[str, str]]
) -> list[str]:
    timesteps = fmt.listing(sweep_timesteps(results))
    lines = [
        "## Accuracy",
        "",
        f"Each cell is the min – max over n_timesteps ({timesteps}) of the runs that produced a finite value, failed runs "
        "included (an overflow in the backward pass still leaves the solution error measured); `ok` counts the runs "
        f"without failure. {fmt.MISSING} means no run of that setup produced the value.",
        "",
        *(line for note in tableau_notes(results) for line in (note, "")),
        "### Relative error",
        "",
        tables.accuracy_table(results, in_units_of_u=False, with_mode=with_mode),
        "",
        "### In units of the unit roundoff u",
        "",
        f"The unit roundoff u of each dtype: {fmt.unit_roundoffs(results)}.",
        "",
        tables.accuracy_table(results, in_units_of_u=True, with_mode=with_mode),
    ]
    found = growths(results)
    if found:
        lines += [
            "",
            "### Parameter-gradient error from the smallest to the largest n_timesteps",
            "",
            "Over the n_timesteps at which each setup ran without failure; the ratio is largest n over smallest n.",
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
                f"Per dtype, the {WORST_PARAMETERS} parameters with the largest gradient error over the runs without failure, "
                "and a run where it was that large.",
                "",
                tables.worst_parameters_table(worst, with_mode),
            ]
    shown = [name for name in ERROR_FIGURES if name in figures]
    if shown:
        lines += ["", "### Figures", ""]
        for name in shown:
            png, svg = figures[name]
            lines += [f"![{METRIC_NAMES[ERROR_FIGURES[name]]} error against n_timesteps]({png}) ([SVG]({svg}))", ""]
        lines.append(
            "One line per library × scaling; the dotted line is the unit roundoff u. A × marks a failed run: at its "
            "value where it has one, in the grey band at the top of the panel where it has none. Skipped configurations "
            "are not drawn."
        )
    return lines


def adjoint_range(figures: dict[str, tuple[str, str]]) -> list[str]:
    drawn = sorted((int(name.rsplit("_n", 1)[1]), paths) for name, paths in figures.items() if name.startswith(ADJOINT_FIGURE))
    if not drawn:
        return []
    lines = [
        "## Range of the adjoint",
        "",
        "The largest magnitude of the adjoint of the state as the low dtype holds it at each backward step (multiplied by "
        "the loss or adjoint scale in effect, then rounded to the low dtype), against the dtype's largest finite number and "
        "its smallest normal number (where they lie near the data); the grey lines are each library's float64 reference "
        "(unscaled). A × marks a step with a non-finite value in a run that failed, a ○ one in a run that still ended ok "
        "(its backward used a wider adjoint, or its scaler redid the step; the key findings list them), each in the grey "
        f"band at the top when the value itself is not finite. Drawn at the largest n_timesteps and at every n_timesteps where a run failed: n = {fmt.listing(n for n, _ in drawn)}.",
    ]
    for n, (png, svg) in drawn:
        lines += ["", f"![largest adjoint magnitude per backward step, n_timesteps = {n}]({png}) ([SVG]({svg}))"]
    return lines


# --- what worked and what failed --------------------------------------------------------------------------------------


def worked_and_failed(results: pd.DataFrame, with_mode: bool) -> list[str]:
    every_n = sweep_timesteps(results)
    worked, partly, failed, skipped = [], [], [], []
    for o in setup_outcomes(results):
        label = fmt.setup_label(o.setup, with_mode)
        by_class = {c: [n for n, k in o.failed if k == c] for _, c in o.failed}
        failures = "; ".join(f"{c} at n = {fmt.listing(ns)}" for c, ns in by_class.items())
        if o.skipped and not o.ok and not o.failed:
            skipped.append(f"{label}: {fmt.listing(o.skip_reasons)}")
        elif o.ok and not o.failed:
            worked.append(label + ("" if list(o.ok) == every_n else f" (at n = {fmt.listing(o.ok)})"))
        elif o.ok:
            partly.append(f"{label}: ran at n = {fmt.listing(o.ok)}; {failures}")
        else:
            failed.append(f"{label}: {failures}")
    lines = ["## What worked and what failed"]
    for title, items in (
        (f"Worked at every n_timesteps ({fmt.listing(every_n)})", worked),
        ("Worked at some n_timesteps", partly),
        ("Failed at every n_timesteps it ran", failed),
        ("Skipped", skipped),
    ):
        if items:
            lines += ["", f"### {title}", ""] + [f"- {item}" for item in fmt.bounded_items(items, "more setups")]
    return lines
