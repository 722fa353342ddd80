"""`roundoff report`: a markdown analysis of one sweep folder, with figures, written from its Parquet tables."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..storage.results import atomic_write_bytes
from .markdown import render
from .sweep_folder import SweepFolder, read_sweep_folder

REPORT = "report.md"
# Read from the modules that draw, which import matplotlib (0.4 s): a sweep imports them when its report is written,
# where its process waits on the report's second process anyway, not while its workers wait to start.
_DRAWING = {"draw_figures": "figure_plan", "figure_plan": "figure_plan", "FIGURES": "figure_files"}


def __getattr__(name: str) -> Any:
    if name in _DRAWING:
        return getattr(importlib.import_module(f".{_DRAWING[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["write_report", "read_sweep_folder", "draw_figures", "figure_plan", "SweepFolder", "REPORT", "FIGURES"]


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of a sweep folder (default `folder/report.md`) and its figures under `folder/figures/`.

    Bad input raises InputError before anything is written; each file is written to a temporary name and renamed.
    """
    sweep = read_sweep_folder(folder)
    target = Path(out) if out is not None else sweep.path / REPORT
    if target.is_dir():
        raise InputError(f"--out '{target}' is a folder; give the path of the markdown file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    from .figure_files import save_figures

    links: dict[str, tuple[str, str]] = {}
    for png in save_figures(sweep):
        links[png.stem] = (_relative(png, target.parent), _relative(png.with_suffix(".svg"), target.parent))
    atomic_write_bytes(target, render(sweep, links).encode())
    return target


def _relative(path: Path, start: Path) -> str:
    # Markdown links use forward slashes on every platform.
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()
