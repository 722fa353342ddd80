"""`local`: one configuration after another in this process (the default)."""
from __future__ import annotations

import torch

from ..devices import resolve_device
from ..errors import InputError
from .base import EXECUTORS, Execution, ExecutionReport
from ..threads import torch_threads
from ..modes import ProblemCopies
from .in_process import measure_in_process, process_yardsticks, sweep_context


class LocalExecutor:
    name = "local"
    description = "one configuration after another in this process (the default)"
    runs_here = True

    def unavailable_reason(self) -> str | None:
        return None

    def target_device(self, config) -> torch.device:
        if config.workers > 1:
            raise InputError(f"executor 'local' runs one configuration at a time; for --workers {config.workers} "
                             "use --executor processes (the default when --workers is above 1)")  # fmt: skip
        return resolve_device(config.device)

    def settings(self, config) -> dict:
        return {"executor": self.name}

    def run(self, execution: Execution) -> ExecutionReport:
        plan = execution.plan
        copies = ProblemCopies(plan.problem)
        context = sweep_context(plan, copies, process_yardsticks(plan, copies, execution.store))
        report = ExecutionReport()
        progress = execution.progress
        try:
            with torch_threads(execution.plan.threads):
                completed = measure_in_process(
                    execution.pending, context, execution.store, progress.begin, progress.finish, execution.stop_requested
                )
        except KeyboardInterrupt:
            completed = False
        report.interrupted = not completed
        report.add_references(context.references.n_solves, context.references.seconds)
        return report


EXECUTORS.register(LocalExecutor())
