"""What one Slurm array task runs: one reference group of the sweep, measured on the task's node."""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path

from ..axes.grid import Configuration
from ..core.breakpoints import make_breakpoints_inert
from ..core.errors import one_line
from .slurm_arrays import ArrayLog, this_task
from .worker import Worker, WorkerSettings


def task_threads() -> int:
    """The CPUs Slurm gave this task: --cpus-per-task when set, else Slurm's default of one."""
    return int(os.environ.get("SLURM_CPUS_PER_TASK") or 1)


def run_array_task(settings: WorkerSettings, group: list[Configuration]) -> dict:
    """Measure the group into the sweep folder's shards, and leave a report for the process watching the array."""
    make_breakpoints_inert()  # nobody sits at a Slurm task's debugger prompt
    log = ArrayLog(Path(settings.out_dir))
    try:
        worker = Worker(replace(settings, threads=task_threads()))
        # Tasks that start together compute different pieces of the yardsticks, each starting at its own.
        worker.prepare_yardsticks(first=int(os.environ.get("SLURM_ARRAY_TASK_ID") or 0), key=group[0].problem_key)
        report = asdict(
            worker.run(group, begin=lambda c: None, finish=lambda c, row: None, stop_requested=lambda: False)
        )
    except Exception as exc:  # noqa: BLE001 - recorded for the watcher, then raised for submitit's log
        log.write_report(this_task(), {"error": one_line(exc)})
        raise
    log.write_report(this_task(), report)
    return report
