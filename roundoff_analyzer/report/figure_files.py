"""The report's figure files, saved in two processes where that is quicker than one.

Saving the figures is most of a report's time (on the default otflow sweep, about 2.4 s of 3 on this project's
2-core machine), while the sweep's workers have ended and left a core idle. Where this process has started the
workers' fork server (a sweep that ran in worker processes), a process forked from it saves the last of the figures
from the folder's tables while this one saves the rest: it first imports pandas, matplotlib and the report (about
0.8 s; it starts before this process imports matplotlib, 0.4 s, which the figures' plan does not need), so it takes
one figure in HELPER_SHARE, the last ones (the adjoint's range, drawn over every step, is the
costliest). The files are the same bytes either way: the same code draws them from the same tables, with this
process's matplotlib settings; should the helper fail, this process saves its figures too.

After a sweep whose answer is timed again, the helper starts earlier and saves every figure (`draw_ahead`): the timing
pass runs in this process alone for seconds (at least MIN_REPEATS rounds), leaving the other core idle, and the figures
are drawn from the results and the profile, which the timing pass does not change.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class FiguresAhead:
    """Every figure of a folder's report being saved in a second process, started by `draw_ahead`."""

    pool: concurrent.futures.ProcessPoolExecutor
    pending: concurrent.futures.Future

    def drawn(self) -> tuple[list[str], list[str]] | None:
        """(the figures the helper planned, those it drew) once it has ended; None where it failed."""
        with self.pool:
            return _result(self.pending)

    def cancel(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def draw_ahead(folder: Path, helper: bool | None = None) -> FiguresAhead | None:
    """Start saving every figure of the folder's report in a second process now, while this one goes on (times the
    answer again); None where no second process is used (`helper`, default: where that process forks at once and has
    a core of its own)."""
    if not (_helper_available() if helper is None else helper):
        return None
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=worker_context())
    return FiguresAhead(pool, pool.submit(save_all_in_helper, folder, _style()))


def save_figures(sweep: SweepFolder, helper: bool | None = None, ahead: FiguresAhead | None = None) -> list[Path]:
    """Draw and save every figure of the report under `sweep.path / FIGURES`; returns each saved figure's PNG path,
    in the report's order. `helper`: whether a second process saves some of them (default: where this process
    started the fork server and has a second core). `ahead`: a helper that has been saving all of them; those it did
    not plan as this process does (the folder changed meanwhile), or all where it failed, are saved here."""
    plan = figure_plan(sweep)
    names = list(plan)
    folder = sweep.path / FIGURES
    if ahead is not None:
        found = ahead.drawn()
        if found is not None and found[0] == names:
            return [folder / f"{name}.png" for name in names if name in found[1]]
        helper = False
    if helper is None:
        helper = _helper_available()
    helped = names[len(names) - max(1, len(names) // HELPER_SHARE) :] if helper and len(names) > 1 else []
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


def save_all_in_helper(root: Path, style: dict[str, Any]) -> tuple[list[str], list[str]]:
    """In the helper: draw and save every figure of the folder's report; returns (the figures planned, those drawn)."""
    names = list(figure_plan(read_sweep_folder(root)))
    return names, save_in_helper(root, names, style)


def _helper_available() -> bool:
    return fork_server_started() and available_cores() > 1


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


def _result(pending: concurrent.futures.Future | None) -> Any:
    if pending is None:
        return None
    try:
        return pending.result()
    except Exception:  # noqa: BLE001 - a helper that failed (or died) costs its figures a second drawing, no more
        return None
