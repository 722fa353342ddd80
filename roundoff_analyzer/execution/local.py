"""`local`: one configuration after another in this process (the default for a small grid, or with --workers 1)."""

from __future__ import annotations

import torch

from ..core.devices import resolve_device
from ..core.errors import InputError
from ..core.threads import torch_threads
from .base import EXECUTORS, Execution, ExecutionReport, Executor
from .in_process import ProcessProblems, by_problem, measure_in_process


class LocalExecutor(Executor):
    name = "local"
    description = "one configuration after another in this process (the default for a small grid)"
    runs_here = True

    def unavailable_reason(self) -> str | None:
        return None

    def target_device(self, config) -> torch.device:
        if config.workers > 1:
            raise InputError(
                f"executor 'local' runs one configuration at a time; for --workers {config.workers} "
                "use --executor processes (the default when --workers is above 1)"
            )
        return resolve_device(config.device)

    def settings(self, config) -> dict:
        return {"executor": self.name}

    def run(self, execution: Execution) -> ExecutionReport:
        plan = execution.plan
        problems = ProcessProblems.of(plan, execution.store)
        report = ExecutionReport()
        progress = execution.progress
        completed = True
        # One problem (checkpoint, seed) after the other, each with its own references (freed before the next's).
        for key, pending in by_problem(execution.pending).items():
            shared = problems.shared(plan, key)
            try:
                with torch_threads(plan.threads):
                    completed = measure_in_process(
                        pending, shared, execution.store, progress.begin, progress.finish, execution.stop_requested
                    )
            except KeyboardInterrupt:
                completed = False
            report.add_references(shared.references.n_solves, shared.references.seconds)
            if not completed:
                break
        report.interrupted = not completed
        return report


EXECUTORS.register(LocalExecutor())
