"""The executor axis: where a sweep's configurations run (this process, worker processes, a Slurm array).

Every executor gets the same `Execution` (the plan, the result store, what is left to run, the
progress and the stop flag) and writes one shard per finished configuration through the store, so
resuming, combining and checking results never depend on how the configurations were run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

import torch

from ..grid import Configuration
from ..registry import Registry
from ..results import ResultStore

if TYPE_CHECKING:
    from ..config import SweepConfig
    from ..sweep import Progress, SweepPlan


@dataclass
class Execution:
    plan: "SweepPlan"
    store: ResultStore
    pending: list[Configuration]
    progress: "Progress"
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


class Executor(Protocol):
    name: str
    description: str
    # False when the configurations run elsewhere: the problem built here is then only fingerprinted, on the CPU.
    runs_here: bool

    def unavailable_reason(self) -> str | None:
        """Why this executor cannot be used from this machine (a missing package or program), or None."""
        ...

    def target_device(self, config: "SweepConfig") -> torch.device:
        """The device the configurations will run on; settings this executor cannot honour are an InputError."""
        ...

    def settings(self, config: "SweepConfig") -> dict:
        """How the sweep was run, for the manifest."""
        ...

    def run(self, execution: Execution) -> ExecutionReport: ...

    # Optional: `warm_up(config) -> None`, called while the plan is built, starts what takes seconds to be ready
    # (the processes executor's fork server, which imports torch) so that it overlaps the building of the problem.


EXECUTORS: Registry[Executor] = Registry("executor")


class NoProgress:
    def start(self, total: int, already_done: int) -> None: ...
    def begin(self, config: Configuration) -> None: ...
    def finish(self, config: Configuration, row: dict) -> None: ...
    def note(self, text: str) -> None: ...
