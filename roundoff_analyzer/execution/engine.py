"""The sweep engine: a plan, with the registered executors, run into the folder's shards (what the folder does not hold
yet), then the shards combined into the tables. config -> plan (planning/) -> executor (here) -> shards -> tables
(storage/)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pandas as pd

from ..core.environment import EnvironmentFailure
from ..planning.config import SweepConfig
from ..planning.manifest import fingerprint, row_settings, timestamp
from ..planning.manifest import manifest as sweep_manifest
from ..planning.sweep_plan import SweepPlan, default_out_dir, make_plan
from ..storage.results import ResultStore
from .base import Execution, ExecutionReport, Executor, NoProgress, Progress, planned
from .executors import EXECUTORS

__all__ = [
    "EnvironmentFailure",
    "SweepIncomplete",
    "SweepInterrupted",
    "SweepOutcome",
    "SweepPlan",
    "default_out_dir",
    "plan",
    "run",
    "tables_after_interrupt",
]


class SweepInterrupted(Exception):
    """The sweep stopped early (Ctrl-C); what finished is on disk and `results.parquet` holds it."""

    def __init__(self, out_dir: Path, n_done: int, n_total: int, note: str | None = None) -> None:
        super().__init__(f"interrupted with {n_done} of {n_total} configurations done in {out_dir}")
        self.out_dir, self.n_done, self.n_total, self.note = out_dir, n_done, n_total, note


class SweepIncomplete(Exception):
    """Nobody asked to stop, yet configurations have no result (a worker died, a Slurm task
    failed); the rest is on disk."""

    def __init__(self, out_dir: Path, n_done: int, n_total: int, problems: list[str]) -> None:
        super().__init__(
            f"{n_total - n_done} of {n_total} configurations have no result in {out_dir}: {'; '.join(problems)}"
        )
        self.out_dir, self.n_done, self.n_total, self.problems = out_dir, n_done, n_total, problems


@dataclass
class SweepOutcome:
    results: pd.DataFrame
    out_dir: Path
    n_run: int
    n_reused: int
    reference_solves: int
    reference_seconds: float
    wall_seconds: float


def plan(config: SweepConfig, checked: bool = False) -> SweepPlan:
    """The sweep `config` asks for, checked and built before anything touches the disk, its executor one of those
    registered (planning/sweep_plan.py's make_plan)."""
    return make_plan(config, planned(EXECUTORS), checked)


def run(
    plan: SweepPlan,
    out_dir: Path,
    progress: Progress | None = None,
    force: bool = False,
    stop_requested: Callable[[], bool] | None = None,
) -> SweepOutcome:
    """Run what `out_dir` does not hold yet, with the plan's executor. `stop_requested` is asked between
    configurations (those differing in their scaling only run as one: measuring/measure.py); on a stop or a
    KeyboardInterrupt the finished shards stay, the tables are rebuilt from them, and SweepInterrupted is raised
    (SweepIncomplete when configurations were lost otherwise)."""
    started = time.perf_counter()
    store = ResultStore(out_dir)
    manifest = sweep_manifest(plan)
    store.open(manifest, force=force)  # locks the folder until store.close()
    try:
        return _run_locked(plan, store, manifest, started, progress or NoProgress(), stop_requested or (lambda: False))
    finally:
        store.close()


def _run_locked(
    plan: SweepPlan, store: ResultStore, manifest: dict, started: float, progress: Progress, stop_requested
) -> SweepOutcome:
    out_dir, n_total = store.root, len(plan.configurations)
    done = store.completed()
    pending = [c for c in plan.configurations if c.id not in done]
    progress.start(n_total, n_total - len(pending))
    for note in (store.manifest_note, store.set_aside_note()):
        if note:
            progress.note(note)
    # The plan's executor is one of EXECUTORS (see `plan`): planning knows it only as far as it plans.
    executor = cast(Executor, plan.executor)
    try:
        report = executor.run(Execution(plan, store, pending, progress, stop_requested))
    except KeyboardInterrupt:  # one the executor did not catch itself (e.g. while submitting): what is on disk stays
        report = ExecutionReport(interrupted=True)
    except OSError as exc:  # the machine stopped it (a full disk, a folder made read-only): say how far it got
        raise EnvironmentFailure(out_dir, len(_done_despite(store, exc)), n_total, exc) from None
    try:
        results = store.combine(plan.configurations)
    except OSError as exc:
        raise EnvironmentFailure(out_dir, len(_done_despite(store, exc)), n_total, exc) from None
    if report.interrupted and len(results) < n_total:  # a stop that came after the last configuration changes nothing
        raise SweepInterrupted(out_dir, len(results), n_total, report.note)
    if len(results) < n_total:
        raise SweepIncomplete(
            out_dir, len(results), n_total, report.problems or ["the executor left them without saying why"]
        )
    wall = time.perf_counter() - started
    try:
        store.write_manifest(
            {**manifest, "finished_at": timestamp(), "duration_s": wall, "n_configurations": len(results)}
        )
    except OSError as exc:
        raise EnvironmentFailure(out_dir, len(results), n_total, exc) from None
    store.drop_yardsticks()
    return SweepOutcome(
        results, out_dir, len(pending), n_total - len(pending), report.reference_solves, report.reference_seconds, wall
    )


def _done_despite(store: ResultStore, exc: OSError) -> set[str]:
    """The configurations whose shards are whole on disk, after `exc` stopped the sweep."""
    try:
        return store.completed()
    except OSError:
        return set()


def tables_after_interrupt(plan: SweepPlan, out_dir: Path) -> SweepInterrupted:
    """Rebuild the combined tables from the shards after an interrupt that cut `run` short, and say what is done."""
    results = ResultStore(out_dir, fingerprint(plan), row_settings(plan)).combine(plan.configurations)
    return SweepInterrupted(out_dir, len(results), len(plan.configurations))
