"""Live progress of a sweep: a rich bar with the current configuration and an ETA, in a terminal or a notebook
(rich draws it there too); `roundoff sweep` and `roundoff_analyzer.sweep(...)` both show it."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..axes.grid import Configuration
from ..core.text import printable
from ..measuring.outcomes import Status

STATUS_STYLE = {Status.OK: "green", Status.FAILED: "red", Status.SKIPPED: "yellow"}


class RichProgress:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}", markup=False),  # a configuration's label: user text
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None  # the bar, from `start` on

    def __enter__(self) -> RichProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def start(self, total: int, already_done: int) -> None:
        if already_done:
            self.console.print(
                f"resuming: {already_done} of {total} configurations are already on disk and are skipped",
                soft_wrap=True,
            )
        self._task = self._progress.add_task("", total=total, completed=already_done)

    def _bar(self) -> TaskID:
        assert self._task is not None, "a sweep's progress starts before its configurations do"
        return self._task

    def begin(self, config: Configuration) -> None:
        self._progress.update(self._bar(), description=config.label())

    def finish(self, config: Configuration, row: dict) -> None:
        self._progress.advance(self._bar())
        if row["status"] == Status.FAILED:
            self._progress.console.print(
                f"[red]failed[/] {escape(printable(config.label()))}: {escape(printable(row['failure_class']))}: "
                f"{escape(printable(row['failure_message']))}",
                markup=True,
                highlight=False,
            )

    def note(self, text: str) -> None:
        self._progress.console.print(printable(text), markup=False, highlight=False, soft_wrap=True)
