"""Which figures a sweep folder's report has, each drawn only when asked: the report saves some of them in a second
process (figure_files.py), which draws them from the folder itself."""

from __future__ import annotations

import functools
from collections.abc import Callable

from matplotlib.figure import Figure

from ..judging import format_search as search
from ..judging import verdict as rules
from . import figures
from .checkpoint_scope import judged_rows
from .format_search import FEW_FORMATS, FORMAT_FIGURE
from .placements import placements_as_modes
from .sweep_folder import SweepFolder
from .training_figure import TRAINING_FIGURE, along_training_figure
from .training_findings import TRAINING_METRICS, trends


def figure_plan(sweep: SweepFolder) -> dict[str, Callable[[], Figure | None]]:
    """How to draw every figure of the report, by file name, each drawn only when asked (None: nothing to draw): the
    error figures, the adjoint's range at each n_timesteps where a run failed and at the largest (of the last
    checkpoint, for a sweep over several), the errors along training, and the format search."""
    judged, _ = judged_rows(sweep)
    results = placements_as_modes(judged.results)
    profile = placements_as_modes(judged.profile) if judged.profile is not None else None
    ran = results[results["status"] != "skipped"]
    plan: dict[str, Callable[[], Figure | None]] = {}
    if not ran.empty:
        for name, metric in figures.ERROR_FIGURES.items():
            plan[name] = functools.partial(figures.error_figure, ran, metric)
    for n in figures.adjoint_timesteps(profile, results):
        plan[f"{figures.ADJOINT_FIGURE}_n{n}"] = functools.partial(figures.adjoint_range_figure, profile, n, results)
    if any(trends(sweep.results, metric) for metric in TRAINING_METRICS):
        plan[TRAINING_FIGURE] = functools.partial(along_training_figure, sweep.results)
    searched = search.emulated(search.format_results(sweep.results))
    if len(searched) > FEW_FORMATS:
        plan[FORMAT_FIGURE] = functools.partial(
            figures.format_search_figure, searched, rules.WELL_UNDER, rules.AT_OR_ABOVE
        )
    return plan


def draw_figures(sweep: SweepFolder) -> dict[str, Figure]:
    """Every figure of the report by file name (`figure_plan`'s, drawn)."""
    drawn = {name: draw() for name, draw in figure_plan(sweep).items()}
    return {name: figure for name, figure in drawn.items() if figure is not None}
