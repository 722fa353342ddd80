"""The Python API of training: `roundoff train` is a thin layer over these functions.

import roundoff_analyzer as ra
result = ra.train(model="cnf", options={"batch": 256}, iters=500, save_at=[0, 100, 500], dtype=["float32", "float16"],
                  scaling="dynamic", out="results/cnf-train")
result.summary        # training_summary.parquet: one row per setup
result.log            # training_log.parquet: one row per setup and iteration
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.safe_files import refuse_links
from ..core.threads import torch_threads
from ..core.version import __version__
from ..planning.config import list_valued_keys
from ..storage.folder_lock import FolderLock
from ..storage.results import atomic_write_parquet
from ..storage.training_summary import summary_table
from .config import TrainConfig
from .files import load_resume
from .folder import (
    KIND,
    LOG,
    SUMMARY,
    WRITTEN_ENTRIES,
    clear_training,
    read_manifest,
    remove_abandoned,
    setup_folder,
    utc_now,
    write_manifest,
)
from .log import read_log, write_log
from .loop import NoProgress, SetupRun, TrainProgress, train_setup
from .request_checks import TrainPlan, option_strings, plan_training
from .summary import setup_summary
from .timing import TIMING_ROUNDS, interleaved_times
from .training_report import write_training_report

# Keys whose value is a list in a config file: a single value is taken as a list of one in Python.
_LIST_KEYS = list_valued_keys(TrainConfig)


@dataclass(frozen=True)
class TrainResult:
    """A finished training: its folder and its tables.

    Attributes:
        folder: The training folder.
        manifest: `manifest.json`: the model, the setups, the settings and the fingerprint of the training.
        log: `training_log.parquet`, one row per setup and iteration (loss, validation loss, lost updates, ...).
        summary: `training_summary.parquet`, one row per setup (final loss and validation loss, time per
            iteration, peak memory, bytes of weights and optimizer state, each also against the first setup).

    Example:
        ```python
        trained = ra.train(model="cnf", iters=200, dtype=["float32", "float16"], scaling="dynamic")
        trained.summary[["setup", "final_val_loss"]]
        ```
    """

    folder: Path
    manifest: dict
    log: pd.DataFrame
    summary: pd.DataFrame


def plan(
    model: str | None = None,
    *,
    config: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
    **settings: Any,
) -> TrainPlan:
    """Validate a training without running it; bad input raises InputError before anything is written."""
    overrides = {
        key: [value] if key in _LIST_KEYS and isinstance(value, (str, int)) else value
        for key, value in {"model": model, **settings}.items()
    }
    return plan_training(config, overrides, out, force)


def run(
    plan: TrainPlan, progress: TrainProgress | None = None, stop_requested: Callable[[], bool] | None = None
) -> TrainResult:
    """Train every setup of the plan in turn, resuming what the folder holds; raises
    loop.TrainingInterrupted on a stop."""
    progress, stop_requested = progress or NoProgress(), stop_requested or (lambda: False)
    root = plan.out
    root.mkdir(parents=True, exist_ok=True)
    refuse_links(root, WRITTEN_ENTRIES)
    lock = FolderLock(root)
    lock.acquire()
    try:
        if plan.resumable is None and plan.force:
            clear_training(root)
        remove_abandoned(root)  # as a resumed sweep does: what a killed run was writing
        manifest = _manifest(plan)
        write_manifest(root, manifest)
        initial = copy.deepcopy(plan.problem.model.state_dict())
        validation = plan.stream.validation_set()
        runs: dict[str, SetupRun] = _earlier_runs(plan, manifest)

        def saved(label: str) -> Callable[[SetupRun], None]:
            def write(run: SetupRun) -> None:
                runs[label] = run
                _write_log(root, runs)

            return write

        folders = {s.setup_label: root / setup_folder(i, s.setup_label) for i, s in enumerate(plan.setups)}
        with torch_threads(plan.threads):
            for setup in plan.setups:
                runs[setup.setup_label] = train_setup(
                    plan,
                    setup,
                    folders[setup.setup_label],
                    initial,
                    validation,
                    progress,
                    stop_requested,
                    saved(setup.setup_label),
                )
            progress.note(f"timing: {TIMING_ROUNDS} iterations of each setup, interleaved")
            final = {label: load_resume(folder) for label, folder in folders.items()}
            timings = interleaved_times(plan, initial, {k: v for k, v in final.items() if v is not None})
        _write_log(root, runs)
        log = read_log(root / LOG)
        summary = setup_summary(log, manifest["setups"], runs, timings)
        atomic_write_parquet(summary_table(summary), root / SUMMARY)
        write_manifest(root, {**manifest, "finished_at": utc_now()})
        write_training_report(root)
        finished = read_manifest(root)
        assert finished is not None  # written just above
        return TrainResult(root, finished, log, summary)
    finally:
        lock.release()


def train(
    model: str | None = None,
    *,
    config: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
    progress: TrainProgress | None = None,
    **settings: Any,
) -> TrainResult:
    """Train a model in each precision setup, as `roundoff train` does, and return its tables.

    Args:
        model: A built-in model's name, `package.module:factory` or `path/to/file.py:factory` (a factory that returns
            `sample_batch`, since training draws a new batch each iteration).
        config: A TOML training config file; `model` and `settings` override its keys.
        out: The training folder; a folder of the same training is resumed.
        force: Replace a folder that holds another training.
        progress: An object following `roundoff_analyzer.TrainProgress`; default none shown.
        **settings: The keys of a training config file (`iters`, `save_at`, `lr`, `dtype`, `scaling`, `weights`,
            `update`, `optimizer_state`, `optimizer`, `clip_grad_norm`, ...); a single value stands for a list of one.

    Returns:
        The finished training's tables.

    Raises:
        InputError: Bad input, in one line saying what is allowed, before anything is written.
        TrainingInterrupted: Asked to stop between iterations; the state reached is saved and a second call resumes.

    Example:
        ```python
        trained = ra.train(model="cnf", iters=500, dtype=["float32", "bfloat16"], weights=["float32", "bfloat16"],
                           update="kahan", out="results/cnf-train")
        trained.summary
        ```
    """
    return run(plan(model, config=config, out=out, force=force, **settings), progress)


def _write_log(root: Path, runs: dict[str, SetupRun]) -> None:
    write_log([row for run in runs.values() for row in run.rows], root / LOG)


def _earlier_runs(plan: TrainPlan, manifest: dict) -> dict[str, SetupRun]:
    """Setups trained into this folder by an earlier command and not asked for now: their rows stay in the log."""
    asked = {s.setup_label for s in plan.setups}
    runs = {}
    for entry in manifest["setups"]:
        if entry["label"] not in asked:
            state = load_resume(plan.out / entry["folder"])
            if state is not None:
                runs[entry["label"]] = SetupRun.from_state(state)
    return runs


def _manifest(plan: TrainPlan) -> dict:
    config = plan.config
    earlier = plan.resumable or {}
    asked = [{**s.as_dict(), "folder": setup_folder(i, s.setup_label)} for i, s in enumerate(plan.setups)]
    labels = {s["label"] for s in asked}
    setups = asked + [s for s in earlier.get("setups", []) if isinstance(s, dict) and s.get("label") not in labels]
    return {
        "kind": KIND,
        "tool": "roundoff-analyzer",
        "version": __version__,
        "created_at": earlier.get("created_at", utc_now()),
        "updated_at": utc_now(),
        "model": plan.model.name,
        "options": option_strings(plan.options),
        "seed": plan.options.seed,
        "data": config.data,
        "data_source": plan.problem.data_source,
        "iters": config.iters,
        "save_at": plan.save_at,
        "resume_every": config.resume_every,
        "lr": config.lr,
        **_optimizer_record(plan),
        "clip_grad_norm": config.clip_grad_norm,
        "val_batches": config.val_batches,
        "val_every": config.val_every,
        "validation": plan.fingerprint["validation"]
        + " at each setup's n_timesteps, mean over the held-out batches 1 … val_batches",
        "device": str(plan.device),
        "threads": plan.threads.as_dict(),
        "scaler": config.scaler.model_dump(mode="json"),
        "setups": setups,
        "left_out": plan.left_out,
        "added": plan.added,
        "fingerprint": plan.fingerprint,
    }


def _optimizer_record(plan: TrainPlan) -> dict:
    record = plan.optimizer.record()
    return {
        "optimizer": record["name"],
        "optimizer_description": plan.optimizer.description,
        **({"optimizer_source_sha256": record["source_sha256"]} if "source_sha256" in record else {}),
    }
