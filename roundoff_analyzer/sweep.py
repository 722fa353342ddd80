"""The sweep: config -> grid -> an executor runs each configuration (references from a cache) -> shards -> combined tables."""
from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import platform
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

import pandas as pd
import torch

from . import __version__
from .checkpoints import SweepCheckpoint, expand_checkpoints, load_checkpoints
from .config import SweepConfig
from .data import parse_data
from .devices import describe, resolve_device
from .environment import EnvironmentFailure
from .executors import EXECUTORS, Execution, ExecutionReport, Executor, NoProgress
from .executors.auto_workers import auto_workers
from . import memory
from .grid import Configuration, Grid, file_safe
from .errors import InputError, one_line
from .libraries import resolve_library
from .methods import METHODS
from .models import MODELS, ModelOptions, ModelSpec, Problem, parse_options, resolve_model, scaled_loss
from .results import ResultStore
from .threads import ThreadChoice, choose_threads
from .user_code import source_sha256


class Progress(Protocol):
    def start(self, total: int, already_done: int) -> None: ...
    def begin(self, config: Configuration) -> None: ...
    def finish(self, config: Configuration, row: dict) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class SweepPlan:
    config: SweepConfig
    model: ModelSpec
    options: ModelOptions
    grid: Grid
    configurations: list[Configuration]
    device: torch.device
    problem: Problem
    checkpoint: dict[str, str] | None  # path and sha256 of the weights loaded into the problem
    executor: Executor
    threads: ThreadChoice | None = None  # torch threads for each process that measures (None: leave torch's setting)
    # Every checkpoint, in the grid's order, with a problem of its own (the first is `problem`); empty without --checkpoint.
    checkpoints: list[SweepCheckpoint] = field(default_factory=list)
    workers_reason: str | None = None  # why config.workers processes: "--workers", or the automatic choice's reason

    def problem_for(self, checkpoint: str) -> Problem:
        """The problem of the configurations whose `checkpoint` is this name."""
        return next((c.problem for c in self.checkpoints if c.name == checkpoint), self.problem)

    def train_iteration(self, checkpoint: str) -> int | None:
        return next((c.iteration for c in self.checkpoints if c.name == checkpoint), None)


class SweepInterrupted(Exception):
    """The sweep stopped early (Ctrl-C); what finished is on disk and `results.parquet` holds it."""

    def __init__(self, out_dir: Path, n_done: int, n_total: int, note: str | None = None) -> None:
        super().__init__(f"interrupted with {n_done} of {n_total} configurations done in {out_dir}")
        self.out_dir, self.n_done, self.n_total, self.note = out_dir, n_done, n_total, note


class SweepIncomplete(Exception):
    """Nobody asked to stop, yet configurations have no result (a worker died, a Slurm task failed); the rest is on disk."""

    def __init__(self, out_dir: Path, n_done: int, n_total: int, problems: list[str]) -> None:
        super().__init__(f"{n_total - n_done} of {n_total} configurations have no result in {out_dir}: {'; '.join(problems)}")
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
    """Everything that can be wrong with the request is found here, before anything touches the disk:
    the model, its options, the data file, the checkpoint (the problem is built and the weights loaded),
    the executor and its settings. `checked`: the process that started this one (a worker's) already bounded
    the problem's memory, which costs an import of torch._dynamo (building on the meta device) not worth repeating."""
    model = resolve_model(config.model)
    for library in config.library or ():
        resolve_library(library)  # a user's library named by its location, in a process that has not loaded it yet
    options = parse_options(model, config.options)
    grid = Grid.build(config.timesteps, config.method, config.mode, config.library, config.dtype, config.scaling, config.arithmetic, config.rounding)
    files = expand_checkpoints(config.checkpoint) if config.checkpoint else []
    workers_reason = "--workers" if config.workers is not None else None
    if config.workers is None:
        workers, workers_reason = (1, f"executor {config.executor}") if config.executor not in (None, "processes") else \
            auto_workers(grid.configurations(model.name), resolve_device(config.device))
        config = config.model_copy(update={"workers": workers})
    executor = EXECUTORS.get(config.executor_name)
    device = executor.target_device(config)
    warm_up = getattr(executor, "warm_up", None)  # optional: what takes seconds to start starts while the problem is built
    if warm_up is not None:
        warm_up(config)
    # Built here to check it and fingerprint it; where the runs happen elsewhere, this copy never runs, so the CPU will do.
    build_on, data = device if executor.runs_here else torch.device("cpu"), parse_data(config.data) if config.data else None
    problem = build_problem(model, options, build_on, data, bound_memory=not checked)
    if config.loss_scale != 1.0:
        problem = replace(problem, loss=scaled_loss(problem.loss, config.loss_scale))
    checkpoints = load_checkpoints(problem, files, model.name)
    checkpoint = {k: v for k, v in checkpoints[0].record.items() if k in ("path", "sha256")} if len(checkpoints) == 1 else None
    grid = replace(grid, checkpoints=tuple(c.name for c in checkpoints) or ("",))
    threads = choose_threads(problem.func, problem.y0, device, config.threads, config.workers) if executor.runs_here else None
    return SweepPlan(config, model, options, grid, grid.configurations(model.name), device, problem, checkpoint, executor, threads, checkpoints,
                     workers_reason)  # fmt: skip


def build_problem(model: ModelSpec, options: ModelOptions, device: torch.device, data, bound_memory: bool = True) -> Problem:
    """The problem, after making sure a built-in model's options fit in memory at all (a user's factory runs once only)."""
    if bound_memory and model.name in MODELS:
        memory.check_problem_fits(model, options, data, device)
    try:
        return model.build(options, device, data)
    except Exception as exc:  # noqa: BLE001 - only an allocation that failed is turned into a line here
        if memory.allocation_failed(exc):
            raise InputError(f"model {model.name} with these options does not fit in memory on {device} ({one_line(exc)})") from None
        raise


def default_out_dir(plan: SweepPlan) -> Path:
    return Path("results") / f"{file_safe(plan.model.name)}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def run(
    plan: SweepPlan,
    out_dir: Path,
    progress: Progress | None = None,
    force: bool = False,
    stop_requested: Callable[[], bool] | None = None,
) -> SweepOutcome:
    """Run what `out_dir` does not hold yet, with the plan's executor. `stop_requested` is asked between
    configurations; on a stop or a KeyboardInterrupt the finished shards stay, the tables are rebuilt
    from them, and SweepInterrupted is raised (SweepIncomplete when configurations were lost otherwise)."""
    started = time.perf_counter()
    store = ResultStore(out_dir)
    manifest = _manifest(plan)
    store.open(manifest, force=force)  # locks the folder until store.close()
    try:
        return _run_locked(plan, store, manifest, started, progress or NoProgress(), stop_requested or (lambda: False))
    finally:
        store.close()


def _run_locked(plan: SweepPlan, store: ResultStore, manifest: dict, started: float, progress: Progress, stop_requested) -> SweepOutcome:
    out_dir, n_total = store.root, len(plan.configurations)
    done = store.completed()
    pending = [c for c in plan.configurations if c.id not in done]
    progress.start(n_total, n_total - len(pending))
    if store.set_aside_note():
        progress.note(store.set_aside_note())
    try:
        report = plan.executor.run(Execution(plan, store, pending, progress, stop_requested))
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
        raise SweepIncomplete(out_dir, len(results), n_total, report.problems or ["the executor left them without saying why"])
    wall = time.perf_counter() - started
    try:
        store.write_manifest({**manifest, "finished_at": _now(), "duration_s": wall, "n_configurations": len(results)})
    except OSError as exc:
        raise EnvironmentFailure(out_dir, len(results), n_total, exc) from None
    store.drop_yardsticks()
    return SweepOutcome(results, out_dir, len(pending), n_total - len(pending), report.reference_solves, report.reference_seconds, wall)


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


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _manifest(plan: SweepPlan) -> dict:
    config = plan.config
    grid = {
        "timesteps": list(plan.grid.timesteps), "methods": list(plan.grid.methods), "modes": list(plan.grid.modes),
        "library_dtype_scaling": [list(t) for t in plan.grid.triples], "description": plan.grid.describe(),
    }  # fmt: skip
    model = {"name": plan.model.name, "description": plan.model.description, "options": plan.options.model_dump(mode="json")}
    # What decides the numbers; a folder holding another fingerprint is a different sweep. The problem's
    # hash covers what the options do not: the data file's rows and a checkpoint's weights.
    # A value given twice is the same sweep as given once: the fingerprint's description leaves the repeats out.
    fingerprint = {
        "model": model, "grid": {**grid, "description": plan.grid.describe(repeats=False)}, "device": plan.device.type, "repeats": config.repeats,
        "scaler": config.scaler.model_dump(mode="json"), "loss_scale": config.loss_scale, "noise_batches": config.noise_batches,
        "problem_sha256": problem_hash(plan.problem),
    }  # fmt: skip
    if len(plan.checkpoints) > 1:
        # Only for several checkpoints, so that folders of a single one still resume; the path does not decide the numbers.
        fingerprint["checkpoints"] = [{k: c.record[k] for k in ("name", "sha256", "iteration")} for c in plan.checkpoints]
    if any(METHODS.get(name).adaptive for name in plan.grid.methods):
        fingerprint["step_control"] = {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps}
    if not plan.grid.default_precision:
        # Only where the arithmetic axis is used, so that folders from before it still resume.
        grid["arithmetic"] = list(plan.grid.arithmetics) if plan.grid.arithmetics else "each dtype's default"
        grid["rounding"] = list(plan.grid.roundings)
        fingerprint["fp8_scaling"] = config.fp8_scaling
    return {
        "tool": "roundoff-analyzer",
        "created_at": _now(),
        "fingerprint": fingerprint,
        "settings": row_settings(plan),
        "model": model,
        "data": config.data or plan.model.default_data,
        "data_source": plan.problem.data_source,
        "checkpoint": plan.checkpoint,
        "checkpoints": [c.record for c in plan.checkpoints],
        "grid": grid,
        "n_configurations": len(plan.configurations),
        "seed": plan.options.seed,
        "device": str(plan.device),
        "device_description": describe(plan.device) if plan.executor.runs_here else f"{plan.device} on the {plan.executor.name} executor's nodes",
        "execution": {**plan.executor.settings(config), **({"workers_reason": plan.workers_reason} if plan.workers_reason else {}),
                      **(plan.threads.as_dict() if plan.threads else {})},
        "repeats": config.repeats,
        "timeout_s": config.timeout,
        "cpu_memory": config.cpu_memory,
        "scaler": config.scaler.model_dump(mode="json"),
        "fp8_scaling": config.fp8_scaling,
        "versions": _versions(),
    }


def row_settings(plan: SweepPlan) -> dict:
    """What a row depends on beyond the fingerprint: the time limit and the CPU memory measurement (which decide
    whether a row is a timeout or has a peak memory) and the content of the user's code the sweep loads (a factory
    file edited between two runs builds another vector field). Kept out of the fingerprint, so that a change sets
    the shards it concerns aside rather than refusing the folder; the data file and the weights are in the
    fingerprint's problem hash, and a config file's values are these settings and the fingerprint's."""
    user_code = {spec: source_sha256(spec) for spec in [plan.model.name, *(plan.config.library or [])] if ":" in spec}
    return json.loads(json.dumps({"timeout_s": plan.config.timeout, "cpu_memory": plan.config.cpu_memory, "user_code": user_code}))


def fingerprint(plan: SweepPlan) -> dict:
    """What decides the numbers, as `manifest.json` stores it: a worker that rebuilt the plan checks it against the folder's."""
    return json.loads(json.dumps(_manifest(plan)["fingerprint"]))


def problem_hash(problem: Problem) -> str:
    """The weights and the batch, bit for bit: the same in every process that rebuilds the sweep's problem."""
    digest = hashlib.sha256()
    for name, tensor in [("y0", problem.y0), *problem.func.state_dict().items()]:
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _versions() -> dict:
    import torchdiffeq

    return {
        "roundoff-analyzer": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "torchdiffeq": torchdiffeq.__version__, "cuda": torch.version.cuda, "platform": platform.platform(),
        "git_revision": _git_revision(),
        **_optional_versions(),
    }  # fmt: skip


def _optional_versions() -> dict:
    """Versions of the optional solver packages installed here."""
    versions = {}
    for package in ("torchode", "torchdyn", "rampde"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


class _SweepModule(types.ModuleType):
    """`roundoff_analyzer.sweep(model=..., ...)` runs a sweep (api.sweep), while `roundoff_analyzer.sweep` stays
    this module, the plan and run beneath it, for the code that imports it by that name."""

    def __call__(self, *args, **kwargs):
        from .api import sweep as run_a_sweep  # deferred: the API imports this module

        return run_a_sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _SweepModule
