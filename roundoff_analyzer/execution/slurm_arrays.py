"""Bookkeeping of Slurm arrays in a sweep folder, so that a later `roundoff sweep` with the same `--out`
knows which configurations are still queued or running on the cluster (and leaves them alone) and
why a finished task left configurations without a shard.

    <out>/slurm/arrays.json          the arrays submitted: array task ("12_3"; "12" alone for an array of one)
                                     -> configuration ids
    <out>/slurm/reports/12_3.json    written by the task as it ends: reference solves, or its error
    <out>/slurm/12_3_0_log.{out,err} the task's output (submitit's naming)
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
from pathlib import Path

from ..axes.grid import Configuration
from ..core.json_files import parse_json
from ..storage.results import atomic_write_bytes

SLURM_FOLDER = "slurm"
ARRAYS = "arrays.json"
REPORTS = "reports"


class ArrayLog:
    def __init__(self, out_dir: Path) -> None:
        self.folder = Path(out_dir) / SLURM_FOLDER
        self.path = self.folder / ARRAYS

    def _arrays(self) -> list[dict]:
        try:
            return parse_json(self.path.read_text())
        except (OSError, ValueError):  # none yet (or unreadable: then nothing is known to be queued)
            return []

    def tasks(self) -> dict[str, list[str]]:
        """Every array task ever submitted for this folder -> the ids of its configurations."""
        return {task: ids for array in self._arrays() for task, ids in array["tasks"].items()}

    def last_job_id(self) -> str | None:
        arrays = self._arrays()
        return arrays[-1]["job_id"] if arrays else None

    def add(self, job_id: str, tasks: dict[str, list[Configuration]]) -> None:
        arrays = [
            *self._arrays(),
            {"job_id": job_id, "tasks": {task: [c.id for c in group] for task, group in tasks.items()}},
        ]
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.path, json.dumps(arrays, indent=1).encode())

    def report_path(self, task: str) -> Path:
        return self.folder / REPORTS / f"{task}.json"

    def write_report(self, task: str, report: dict) -> None:
        path = self.report_path(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(report).encode())

    def read_report(self, task: str) -> dict | None:
        try:
            return parse_json(self.report_path(task).read_text())
        except (OSError, ValueError):
            return None


class QueueUnreadable(Exception):
    """squeue did not answer (the controller is busy or gone)."""


def queued_tasks() -> set[str]:
    """Array tasks of this user that Slurm still holds (pending, running, completing), as "job_task"."""
    try:
        out = subprocess.run(
            ["squeue", "--noheader", "--array", "--user", getpass.getuser(), "--format", "%i"],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise QueueUnreadable(str(exc)) from None
    if out.returncode != 0:
        raise QueueUnreadable(out.stderr.strip() or f"squeue exited with {out.returncode}")
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def this_task() -> str:
    """The task this process runs in, named as submitit names it: "job_task", or "job" for an array of one."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array_job}_{task}" if array_job and task else os.environ["SLURM_JOB_ID"]
