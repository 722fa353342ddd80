"""Which figures a sweep folder's report has, each drawn only when asked: the report saves some of them in a second
process (figure_files.py), which draws them from the folder itself."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..axes.models.problem import recorded_as_step
from ..judging import format_search, verdict
from ..measuring.outcomes import Status
from .along_training_findings import TRAINING_METRICS, trends
from .checkpoint_scope import judged_rows
from .figure_data import ADJOINT_FIGURE, ERROR_FIGURES, TRAINING_FIGURE, adjoint_timesteps
from .format_search import FEW_FORMATS, FORMAT_FIGURE
from .placements import placements_as_modes
from .sweep_folder import SweepFolder

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def _drawn(module: str, function: str, *args: Any) -> Callable[[], Figure | None]:
    """`module.function(*args)`, the module imported when the figure is drawn: planning the figures needs no matplotlib
    (0.4 s to import), so a report's second process starts before its first imports it."""
    return lambda: getattr(importlib.import_module(f".{module}", __package__), function)(*args)


def figure_plan(sweep: SweepFolder) -> dict[str, Callable[[], Figure | None]]:
    """How to draw every figure of the report, by file name, each drawn only when asked (None: nothing to draw): the
    error figures, the adjoint's range at each n_timesteps where a run failed and at the largest (of the last
    checkpoint, for a sweep over several), the errors along training, and the format search."""
    judged, _ = judged_rows(sweep)
    results = placements_as_modes(judged.results)
    profile = placements_as_modes(judged.profile) if judged.profile is not None else None
    ran = results[results["status"] != Status.SKIPPED]
    plan: dict[str, Callable[[], Figure | None]] = {}
    if not ran.empty:
        for name, metric in ERROR_FIGURES.items():
            if not _unmeasured(sweep, ran, metric):
                plan[name] = _drawn("figures", "error_figure", ran, metric)
    for n in adjoint_timesteps(profile, results):
        plan[f"{ADJOINT_FIGURE}_n{n}"] = _drawn("figures", "adjoint_range_figure", profile, n, results)
    if any(trends(sweep.results, metric) for metric in TRAINING_METRICS):
        plan[TRAINING_FIGURE] = _drawn("along_training_figure", "along_training_figure", sweep.results)
    searched = format_search.emulated(format_search.format_results(sweep.results))
    if len(searched) > FEW_FORMATS:
        plan[FORMAT_FIGURE] = _drawn(
            "figures", "format_search_figure", searched, verdict.WELL_UNDER, verdict.AT_OR_ABOVE
        )
    return plan


def _unmeasured(sweep: SweepFolder, ran: pd.DataFrame, metric: str) -> bool:
    """Whether `metric` is one no run measures: a step's gradient w.r.t. its batch (ProblemCopies.differentiates_batch,
    which the glossary says), whose figure would be empty."""
    return metric == "grad_y0_rel_err" and recorded_as_step(sweep.manifest.get("problem")) and ran[metric].isna().all()


def draw_figures(sweep: SweepFolder) -> dict[str, Figure]:
    """Every figure of the report by file name (`figure_plan`'s, drawn)."""
    drawn = {name: draw() for name, draw in figure_plan(sweep).items()}
    return {name: figure for name, figure in drawn.items() if figure is not None}
