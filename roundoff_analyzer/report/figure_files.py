"""The report's figure files, saved in two processes where that is quicker than one.

Saving the figures is most of a report's time (on the default otflow sweep, about 2.4 s of 3 on this project's
2-core machine), while the sweep's workers have ended and left a core idle. Where this process has started the
workers' fork server (a sweep that ran in worker processes), a process forked from it saves the last of the figures
from the folder's tables while this one saves the rest: it first imports pandas, matplotlib and the report (about
0.8 s; it starts before this process imports matplotlib, 0.4 s, which the figures' plan does not need), so it takes
one figure in HELPER_SHARE, the last ones (the adjoint's range, drawn over every step, is the
costliest). The files are the same bytes either way: the same code draws them from the same tables, with this
process's matplotlib settings; should the helper fail, this process saves its figures too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..core.cores import available_cores
from ..execution.start_method import fork_server_started, worker_context
from .figure_plan import figure_plan
from .sweep_folder import SweepFolder, read_sweep_folder

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES = "figures"
HELPER_SHARE = 3
# Settings that choose how matplotlib runs, not how a figure looks: left to each process.
_NOT_STYLE = ("backend", "backend_fallback", "interactive", "toolbar", "timezone")


def save_figures(sweep: SweepFolder, helper: bool | None = None) -> list[Path]:
    """Draw and save every figure of the report under `sweep.path / FIGURES`; returns each saved figure's PNG path,
    in the report's order. `helper`: whether a second process saves some of them (default: where this process
    started the fork server and has a second core)."""
    plan = figure_plan(sweep)
    names = list(plan)
    if helper is None:
        helper = fork_server_started() and available_cores() > 1
    helped = names[len(names) - max(1, len(names) // HELPER_SHARE) :] if helper and len(names) > 1 else []
    folder = sweep.path / FIGURES
    saved: dict[str, Path | None] = {}
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=worker_context()) if helped else None
    with pool if pool is not None else contextlib.nullcontext():
        pending = pool.submit(save_in_helper, sweep.path, helped, _style()) if pool is not None else None
        for name in names:
            if name not in helped:
                saved[name] = _save(plan[name], folder, name)
        drawn_there = _result(pending)
    for name in helped:
        if drawn_there is None:  # the helper failed: this process saves its figures too
            saved[name] = _save(plan[name], folder, name)
        else:
            saved[name] = folder / f"{name}.png" if name in drawn_there else None
    return [path for path in (saved[name] for name in names) if path is not None]


def save_in_helper(root: Path, names: list[str], style: dict[str, Any]) -> list[str]:
    """In the helper: draw and save these figures of the folder's report; returns those drawn (a figure with nothing
    to draw is none)."""
    import matplotlib

    plan = figure_plan(read_sweep_folder(root))
    # (rc_context's annotation lists every key it knows; these come from rcParams itself.)
    with matplotlib.rc_context(cast(Any, style)):
        return [name for name in names if _save(plan[name], root / FIGURES, name) is not None]


def _save(draw: Callable[[], Figure | None], folder: Path, name: str) -> Path | None:
    from . import figures

    figure = draw()
    return figures.save(figure, folder, name) if figure is not None else None


def _style() -> dict[str, Any]:
    """This process's matplotlib settings that differ from the defaults and shape a figure, for the helper: none where
    it has not imported matplotlib (whose import, 0.4 s, it then makes while the helper imports too)."""
    if "matplotlib" not in sys.modules:
        return {}
    import matplotlib

    defaults = matplotlib.rcParamsDefault
    return {
        key: value
        for key, value in matplotlib.rcParams.items()
        if key not in _NOT_STYLE and not key.startswith("webagg") and value != defaults.get(key)
    }


def _result(pending: concurrent.futures.Future | None) -> list[str] | None:
    if pending is None:
        return None
    try:
        return pending.result()
    except Exception:  # noqa: BLE001 - a helper that failed (or died) costs its figures a second drawing, no more
        return None
