"""The executor axis: where a sweep's configurations run (this process, worker processes, a Slurm array).

Every executor gets the same `Execution` (the plan, the result store, what is left to run, the
progress and the stop flag) and writes one shard per finished configuration through the store, so
resuming, combining and checking results never depend on how the configurations were run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from ..axes.grid import Configuration
from ..core.registry import Registry
from ..planning.sweep_plan import PlannedExecutor, SweepPlan
from ..storage.results import ResultStore


class Progress(Protocol):
    """What a sweep shows as it goes (the command's progress bar, the API's, or nothing: NoProgress)."""

    def start(self, total: int, already_done: int) -> None: ...
    def begin(self, config: Configuration) -> None: ...
    def finish(self, config: Configuration, row: dict) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class Execution:
    plan: SweepPlan
    store: ResultStore
    pending: list[Configuration]
    progress: Progress
    stop_requested: Callable[[], bool]


@dataclass
class ExecutionReport:
    reference_solves: int = 0
    reference_seconds: float = 0.0
    interrupted: bool = False
    # Why configurations were left without a shard although nobody asked to stop (a worker died, a Slurm task failed).
    problems: list[str] = field(default_factory=list)
    # Said after an interrupt, e.g. that a Slurm array keeps running without this process.
    note: str | None = None

    def add_references(self, solves: int, seconds: float) -> None:
        self.reference_solves += solves
        self.reference_seconds += seconds


class Executor(PlannedExecutor, Protocol):
    """An executor: what planning asks of it (its name, where it runs, the device, its settings) and the run itself."""

    description: str

    def unavailable_reason(self) -> str | None:
        """Why this executor cannot be used from this machine (a missing package or program), or None."""
        ...

    def run(self, execution: Execution) -> ExecutionReport: ...


EXECUTORS: Registry[Executor] = Registry("executor")


def planned(executors: Registry[Executor]) -> Registry[PlannedExecutor]:
    """`executors` as planning reads them: it only looks one up and asks what planning needs (a Registry is invariant
    in its items' type, so a registry of executors is not one of planned executors by itself)."""
    return cast("Registry[PlannedExecutor]", executors)


class NoProgress:
    def start(self, total: int, already_done: int) -> None: ...
    def begin(self, config: Configuration) -> None: ...
    def finish(self, config: Configuration, row: dict) -> None: ...
    def note(self, text: str) -> None: ...
