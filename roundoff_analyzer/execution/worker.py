"""One worker (a process of `--workers N`, or a Slurm array task): rebuild the sweep's problem in this
process from the validated config, make sure it is the sweep the folder holds (same fingerprint, the
problem's weights and batch included), and measure groups of configurations into the folder's shards."""

# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import torch

from ..axes.grid import Configuration
from ..planning.config import SweepConfig
from ..planning.manifest import fingerprint, row_settings
from ..planning.sweep_plan import make_plan
from ..storage.results import ResultStore

# Registers the executor a worker plans with (a worker process may import nothing else).
from . import local  # noqa: F401
from .base import EXECUTORS, planned
from .in_process import ProcessProblems, measure_in_process, yardstick_tasks
from .parent_death import exit_if_sweep_died


@dataclass(frozen=True)
class WorkerSettings:
    # The validated config travels, not the plan: a plan's problem may hold closures (a user's loss) that do not pickle.
    config: SweepConfig
    out_dir: str  # absolute: a Slurm task may start in another folder
    device: str  # where this worker runs: the sweep's device, or one of several GPUs
    threads: int | None  # torch threads for this worker; None keeps torch's default


@dataclass
class GroupReport:
    reference_solves: int
    reference_seconds: float
    completed: bool  # False when a stop request ended the group early


class SweepMismatch(RuntimeError):
    """The sweep rebuilt here is not the one the folder holds: its shards would mix two sweeps."""


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        if settings.threads:
            torch.set_num_threads(settings.threads)
        # Inside a worker the configurations run right here, one after another.
        here = settings.config.model_copy(update={"executor": "local", "workers": 1, "device": settings.device})
        self.plan = make_plan(here, planned(EXECUTORS), checked=True)
        rebuilt = fingerprint(self.plan)
        # Shards written here carry the fingerprint of the sweep rebuilt here, which must be the folder's.
        self.store = ResultStore(Path(settings.out_dir), rebuilt, row_settings(self.plan))
        self.store.before_write = exit_if_sweep_died
        expected = (self.store.read_manifest() or {}).get("fingerprint", {})
        if rebuilt != expected:
            expected = expected if isinstance(expected, dict) else {}
            differs = sorted(key for key in rebuilt if expected.get(key) != rebuilt[key])
            raise SweepMismatch(
                f"the sweep rebuilt on this worker differs from the one {settings.out_dir} holds now "
                f"(in: {', '.join(differs)}): "
                "another data file, checkpoint or model code here, or the folder was replaced with --force"
            )
        # cast copies and yardsticks, once per process and checkpoint
        self.problems = ProcessProblems.of(self.plan, self.store)

    def prepare_yardsticks(self, first: int, key: tuple[str, int]) -> None:
        """Every piece of one problem's (checkpoint's, seed's) yardsticks, computed, awaited or read, from piece
        `first` (modulo their number) on."""
        tasks = [task for task in yardstick_tasks(self.plan) if task[0] == key]
        for i in range(len(tasks)):
            self.problems.prepare(tasks[(first + i) % len(tasks)])

    def run(
        self,
        group: list[Configuration],
        begin: Callable[[Configuration], None],
        finish: Callable[[Configuration, dict], None],
        stop_requested: Callable[[], bool],
    ) -> GroupReport:
        # A group shares one reference (so one problem): a cache per group solves it once and frees it afterwards.
        shared = self.problems.shared(self.plan, group[0].problem_key)
        completed = measure_in_process(group, shared, self.store, begin, finish, stop_requested)
        return GroupReport(shared.references.n_solves, shared.references.seconds, completed)
