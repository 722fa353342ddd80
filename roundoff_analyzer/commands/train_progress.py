"""Live progress of a training: a rich bar per setup with the iteration, the last loss and an ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

from ..core.text import printable

# Below this width the bar and the times are left out of the progress lines.
_NARROW = 72


class TrainRichProgress:
    def __init__(self, console: Console) -> None:
        self.console = console
        # Where the line is too narrow, the setup's label folds and the bar shrinks; on a narrow terminal the times are
        # left out: the numbers are never cut.
        label = TextColumn(
            "{task.fields[setup]}", style="bold", markup=False, table_column=Column(overflow="fold", min_width=8)
        )
        counts = (MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"))
        timing = (
            (BarColumn(bar_width=None, table_column=Column(min_width=4, max_width=20)), *counts)
            + (TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
            if console.width >= _NARROW
            else counts
        )
        self._progress = Progress(
            label,
            *timing,
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> TrainRichProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def start(self, setup: str, total: int, done: int) -> None:
        if done:
            self._progress.console.print(
                f"resuming {printable(setup)} at iteration {done} of {total}", markup=False, highlight=False
            )
        self._task = self._progress.add_task("", total=total, completed=done, setup=printable(setup), loss="—")

    def step(self, iteration: int, loss: float | None) -> None:
        assert self._task is not None, "start() comes before the first step"
        self._progress.update(self._task, completed=iteration, loss=f"{loss:.4g}" if loss is not None else "non-finite")

    def note(self, text: str) -> None:
        self._progress.console.print(printable(text), markup=False, highlight=False, soft_wrap=True)
