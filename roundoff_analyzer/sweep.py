"""The sweep: config -> grid -> each configuration (references from a cache) -> shards -> combined tables."""
from __future__ import annotations

import datetime as dt
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd
import torch

from . import __version__
from .config import SweepConfig
from .devices import describe, resolve_device
from .grid import Configuration, Grid
from .measure import ReferenceCache, SweepContext, measure_configuration
from .models import MODELS, ModelOptions, ModelSpec, parse_options
from .modes import ProblemCopies
from .results import ResultStore


class Progress(Protocol):
    def start(self, total: int, already_done: int) -> None: ...
    def begin(self, config: Configuration) -> None: ...
    def finish(self, config: Configuration, row: dict) -> None: ...


@dataclass
class SweepPlan:
    config: SweepConfig
    model: ModelSpec
    options: ModelOptions
    grid: Grid
    configurations: list[Configuration]
    device: torch.device


@dataclass
class SweepOutcome:
    results: pd.DataFrame
    out_dir: Path
    n_run: int
    n_reused: int
    reference_solves: int
    reference_seconds: float
    wall_seconds: float


def plan(config: SweepConfig) -> SweepPlan:
    """Everything that can be wrong with the request is found here, before anything touches the disk."""
    model = MODELS.get(config.model)
    options = parse_options(model, config.options)
    grid = Grid.build(config.timesteps, config.method, config.mode, config.library, config.dtype, config.scaling)
    device = resolve_device(config.device)
    return SweepPlan(config, model, options, grid, grid.configurations(model.name), device)


def default_out_dir(plan: SweepPlan) -> Path:
    return Path("results") / f"{plan.model.name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def run(plan: SweepPlan, out_dir: Path, progress: Progress | None = None, force: bool = False) -> SweepOutcome:
    started = time.perf_counter()
    problem = plan.model.build(plan.options, plan.device)
    store = ResultStore(out_dir)
    manifest = _manifest(plan, problem.data_source)
    store.open(manifest, force=force)
    done = store.completed()
    pending = [c for c in plan.configurations if c.id not in done]

    copies = ProblemCopies(problem)
    context = SweepContext(
        copies, ReferenceCache(copies, plan.config.scaler), plan.device, plan.config.scaler, plan.config.repeats, plan.config.timeout
    )
    if progress is not None:
        progress.start(len(plan.configurations), len(plan.configurations) - len(pending))
    for config in pending:
        if progress is not None:
            progress.begin(config)
        measurement = measure_configuration(config, context)
        store.write(config, measurement)
        if progress is not None:
            progress.finish(config, measurement.row)

    results = store.combine(plan.configurations)
    wall = time.perf_counter() - started
    store.write_manifest({**manifest, "finished_at": _now(), "duration_s": wall, "n_configurations": len(results)})
    return SweepOutcome(results, out_dir, len(pending), len(plan.configurations) - len(pending),
                        context.references.n_solves, context.references.seconds, wall)  # fmt: skip


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _manifest(plan: SweepPlan, data_source: str) -> dict:
    config = plan.config
    grid = {
        "timesteps": list(plan.grid.timesteps), "methods": list(plan.grid.methods), "modes": list(plan.grid.modes),
        "library_dtype_scaling": [list(t) for t in plan.grid.triples], "description": plan.grid.describe(),
    }  # fmt: skip
    model = {"name": plan.model.name, "description": plan.model.description, "options": plan.options.model_dump(mode="json")}
    # What decides the numbers; a folder holding another fingerprint is a different sweep.
    fingerprint = {
        "model": model, "grid": grid, "device": plan.device.type, "repeats": config.repeats,
        "scaler": config.scaler.model_dump(mode="json"),
    }  # fmt: skip
    return {
        "tool": "roundoff-analyzer",
        "created_at": _now(),
        "fingerprint": fingerprint,
        "model": model,
        "data_source": data_source,
        "grid": grid,
        "n_configurations": len(plan.configurations),
        "seed": plan.options.seed,
        "device": str(plan.device),
        "device_description": describe(plan.device),
        "repeats": config.repeats,
        "timeout_s": config.timeout,
        "scaler": config.scaler.model_dump(mode="json"),
        "versions": _versions(),
    }


def _versions() -> dict:
    import torchdiffeq

    return {
        "roundoff-analyzer": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "torchdiffeq": torchdiffeq.__version__, "cuda": torch.version.cuda, "platform": platform.platform(),
        "git_revision": _git_revision(),
    }  # fmt: skip


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
