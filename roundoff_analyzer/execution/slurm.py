"""`slurm`: one Slurm job array through submitit, one array task per reference group.

Each task rebuilds the problem from the validated config on its node, checks that it is the sweep's
problem, and writes its shards into the shared `--out` folder (slurm_task.py). This process submits
the array, then shows progress as shards appear until none of its tasks is left in the queue.
Ctrl-C here stops the watching, not the array: the same command again shows the array's progress,
leaves what is still queued or running alone, and resubmits what failed or never ran.
"""

from __future__ import annotations

import importlib.util
import shutil
import time

import torch

from ..axes.grid import Configuration, file_safe
from ..core.devices import parse_device
from ..core.errors import InputError, one_line
from ..planning.groups import reference_groups
from .base import EXECUTORS, Execution, ExecutionReport, Executor
from .slurm_arrays import ArrayLog, QueueUnreadable, queued_tasks
from .slurm_task import run_array_task
from .worker import WorkerSettings

POLL_S = 1.0  # how often the shards folder is looked at
QUEUE_POLL_S = 3.0  # how often squeue is asked (the controller serves everyone)
QUEUE_PATIENCE_S = 300.0  # how long squeue may fail before the watching gives up


def _submitit():
    import submitit  # an optional extra: checked by unavailable_reason() before anything needs it

    return submitit


class SlurmExecutor(Executor):
    name = "slurm"
    description = 'a Slurm job array through submitit (the optional "slurm" extra), one task per reference group'
    runs_here = False

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("submitit") is None:
            return 'needs submitit: pip install -e ".[slurm]" -c constraints.txt in the roundoff-analyzer checkout'
        if shutil.which("sbatch") is None:
            return "needs Slurm's sbatch on PATH: run it on a node that submits jobs to the cluster"
        return None

    def target_device(self, config) -> torch.device:
        if config.workers > 1:
            raise InputError(
                "--workers is for --executor processes; a Slurm array runs one task per (library, method, "
                "n_timesteps) group (give each task CPUs with --slurm-option cpus-per-task=N)"
            )
        reason = self.unavailable_reason()
        if reason:
            raise InputError(f"--executor slurm {reason}")
        if config.device == "auto":  # decided by what the tasks ask for, not by this (login) node
            return torch.device("cuda" if config.slurm.gpus_per_task else "cpu")
        return parse_device(config.device)

    def settings(self, config) -> dict:
        return {"executor": self.name, **config.slurm.model_dump(mode="json")}

    def run(self, execution: Execution) -> ExecutionReport:
        log = ArrayLog(execution.store.root)
        try:
            queued = queued_tasks()
        except QueueUnreadable as exc:
            raise InputError(f"cannot read the Slurm queue: {exc}") from None
        # Tasks of earlier runs still on the cluster keep their configurations; everything
        # else missing is (re)submitted.
        tracked = {task: ids for task, ids in log.tasks().items() if task in queued}
        busy = {config_id for ids in tracked.values() for config_id in ids}
        if tracked:
            execution.progress.note(
                f"{len(tracked)} Slurm task(s) of an earlier submission are still queued or running "
                f"({', '.join(sorted(tracked))}); waiting for them, not resubmitting them"
            )
        to_submit = [c for c in execution.pending if c.id not in busy]
        if to_submit:
            submitted = self._submit(execution, log, reference_groups(to_submit))
            execution.progress.note(
                f"submitted Slurm job {log.last_job_id()}: {len(submitted)} task(s), one per "
                f"(library, method, n_timesteps); logs in {log.folder}"
            )
            tracked.update(submitted)
        report = ExecutionReport()
        self._watch(execution, tracked, report)
        if not report.interrupted:
            self._account(execution, log, tracked, report)
        return report

    def _submit(self, execution: Execution, log: ArrayLog, groups: list[list[Configuration]]) -> dict[str, list[str]]:
        plan, settings = execution.plan, execution.plan.config.slurm
        executor = _submitit().SlurmExecutor(folder=log.folder)
        executor.update_parameters(
            job_name=f"roundoff-{file_safe(plan.model.name)}",
            partition=settings.partition,
            time=settings.time,
            gpus_per_task=settings.gpus_per_task,
            additional_parameters=dict(settings.options),
        )
        worker_settings = WorkerSettings(
            plan.config, str(execution.store.root.resolve()), str(plan.device), threads=None
        )
        before = set(log.folder.iterdir()) if log.folder.is_dir() else set()
        try:
            jobs = executor.map_array(run_array_task, [worker_settings] * len(groups), groups)
        except Exception as exc:  # noqa: BLE001 - sbatch refused: an unknown partition, a bad option, ...
            for leftover in set(log.folder.iterdir()) - before:  # submitit's pickles and script of the refused array
                if leftover.is_file():
                    leftover.unlink()
            raise InputError(f"sbatch refused the array: {one_line(exc)}") from None
        tasks = {job.job_id: group for job, group in zip(jobs, groups)}
        log.add(jobs[0].job_id.split("_")[0], tasks)
        return {task: [c.id for c in group] for task, group in tasks.items()}

    def _watch(self, execution: Execution, tracked: dict[str, list[str]], report: ExecutionReport) -> None:
        """Advance the progress as shards appear, until no tracked task is queued, a stop, or squeue stays silent."""
        by_id = {c.id: c for c in execution.pending}
        shown: set[str] = set()

        def show_new_shards() -> None:
            for config_id in sorted((execution.store.completed() & by_id.keys()) - shown):
                shown.add(config_id)
                execution.progress.finish(by_id[config_id], execution.store.read_row(by_id[config_id]))

        next_queue_check, silent_since = 0.0, None
        try:
            while True:
                if execution.stop_requested():
                    report.interrupted = True
                    break
                show_new_shards()
                if time.monotonic() >= next_queue_check:
                    next_queue_check = time.monotonic() + QUEUE_POLL_S
                    try:
                        if not queued_tasks() & tracked.keys():
                            break
                        silent_since = None
                    except QueueUnreadable as exc:
                        silent_since = silent_since or time.monotonic()
                        if time.monotonic() - silent_since > QUEUE_PATIENCE_S:
                            report.problems.append(
                                f"squeue has not answered for {QUEUE_PATIENCE_S:.0f} s ({exc}); "
                                "the array may still be running"
                            )
                            break
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            report.interrupted = True
        show_new_shards()
        if report.interrupted and tracked:
            arrays = sorted({task.split("_")[0] for task in tracked})
            report.note = (
                f"Slurm array {', '.join(arrays)} keeps running without this process; the same command "
                "shows its progress and resubmits what it leaves undone"
            )

    def _account(
        self, execution: Execution, log: ArrayLog, tracked: dict[str, list[str]], report: ExecutionReport
    ) -> None:
        """Reference solves from the tasks' reports; for each task that left configurations undone, why."""
        done = execution.store.completed()
        for task, ids in tracked.items():
            task_report = log.read_report(task) or {}
            if "reference_solves" in task_report:
                report.add_references(task_report["reference_solves"], task_report["reference_seconds"])
            missing = [config_id for config_id in ids if config_id not in done]
            if missing:
                why = (
                    task_report.get("error")
                    or "it ended without a report (time limit, memory, a node failure or scancel?)"
                )
                stderr = _submitit().core.utils.JobPaths(log.folder, job_id=task, task_id=0).stderr
                where = (
                    f"log: {stderr}"
                    if stderr.exists()
                    else "no log: the task never started (cancelled or failed while queued)"
                )
                report.problems.append(
                    f"Slurm task {task} left {len(missing)} configuration(s) without a result: {why}; {where}"
                )


EXECUTORS.register(SlurmExecutor())
