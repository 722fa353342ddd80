"""`roundoff report`: a markdown analysis of one sweep folder, with figures, written from its Parquet tables."""

from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import InputError
from ..judging import format_search as search
from ..judging import verdict as rules
from ..storage.results import atomic_write_bytes
from . import figures
from .checkpoint_scope import judged_rows
from .format_search import FEW_FORMATS, FORMAT_FIGURE
from .markdown import render
from .placements import placements_as_modes
from .sweep_folder import SweepFolder, read_sweep_folder
from .training_figure import TRAINING_FIGURE, along_training_figure

REPORT = "report.md"
FIGURES = "figures"

__all__ = ["write_report", "read_sweep_folder", "SweepFolder", "REPORT", "FIGURES"]


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of a sweep folder (default `folder/report.md`) and its figures under `folder/figures/`.

    Bad input raises InputError before anything is written; each file is written to a temporary name and renamed.
    """
    sweep = read_sweep_folder(folder)
    target = Path(out) if out is not None else sweep.path / REPORT
    if target.is_dir():
        raise InputError(f"--out '{target}' is a folder; give the path of the markdown file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    links: dict[str, tuple[str, str]] = {}
    for name, figure in draw_figures(sweep).items():
        png = figures.save(figure, sweep.path / FIGURES, name)
        links[name] = (_relative(png, target.parent), _relative(png.with_suffix(".svg"), target.parent))
    atomic_write_bytes(target, render(sweep, links).encode())
    return target


def draw_figures(sweep: SweepFolder) -> dict:
    """Every figure of the report by file name: the error figures, and the adjoint's range at each n_timesteps
    where a run failed and at the largest (of the last checkpoint, for a sweep over several), and the errors
    along training."""
    along = along_training_figure(sweep.results)
    sweep, _ = judged_rows(sweep)
    results = placements_as_modes(sweep.results)
    profile = placements_as_modes(sweep.profile) if sweep.profile is not None else None
    ran = results[results["status"] != "skipped"]
    drawn = (
        {name: figures.error_figure(ran, metric) for name, metric in figures.ERROR_FIGURES.items()}
        if not ran.empty
        else {}
    )
    for n in figures.adjoint_timesteps(profile, results):
        adjoint = figures.adjoint_range_figure(profile, n, results)
        if adjoint is not None:
            drawn[f"{figures.ADJOINT_FIGURE}_n{n}"] = adjoint
    if along is not None:
        drawn[TRAINING_FIGURE] = along
    searched = search.emulated(search.format_results(sweep.results))
    if len(searched) > FEW_FORMATS:
        drawn[FORMAT_FIGURE] = figures.format_search_figure(searched, rules.WELL_UNDER, rules.AT_OR_ABOVE)
    return drawn


def _relative(path: Path, start: Path) -> str:
    # Markdown links use forward slashes on every platform.
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()
