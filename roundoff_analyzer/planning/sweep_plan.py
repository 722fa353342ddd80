"""The plan of a sweep: everything the request asks for, checked and built before anything touches the disk (the model
and its options, the data, the checkpoints, the grid's configurations, the device, the threads, the executor)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch

from ..axes.data import DataRequest, parse_data
from ..axes.grid import AXIS_DEFAULTS, Configuration, Grid, file_safe
from ..axes.keep_float32 import unmatched
from ..axes.libraries import resolve_library
from ..axes.models import (
    MODELS,
    ModelOptions,
    ModelProblem,
    ModelSpec,
    TrajectoryProblem,
    parse_options,
    resolve_model,
    takes_seed,
)
from ..axes.modes import ProblemCopies
from ..core.devices import resolve_device, shared_gpu_warning
from ..core.errors import InputError, one_line
from ..core.registry import Registry
from ..core.text import shortened
from ..core.threads import ThreadChoice, choose_threads
from ..core.user_files import user_files
from ..measuring import memory
from ..measuring.contract import (
    ProblemShape,
    check_contract,
    evaluate_once,
    low_precision_failures,
    narrow_warning,
    precisions_of,
)
from ..measuring.gradient_noise import problem_batch_size
from .checkpoints import CheckpointFile, SweepCheckpoint, expand_checkpoints, load_checkpoints
from .config import SweepConfig
from .tolerances import tolerance_warnings
from .workers import EXECUTORS_WITH_PROCESSES, auto_workers

# The module name of a model defined in a notebook or a script run as a program.
IN_MAIN = "__main__:"


class PlannedExecutor(Protocol):
    """What planning asks of an executor (execution/base.py's Executor, which also runs the plan)."""

    name: str
    # False when the configurations run elsewhere: the problem built here is then only fingerprinted, on the CPU.
    runs_here: bool

    def target_device(self, config: SweepConfig) -> torch.device:
        """The device the configurations will run on; settings this executor cannot honour are an InputError."""
        ...

    def settings(self, config: SweepConfig) -> dict:
        """How the sweep was run, for the manifest."""
        ...

    # Optional: `warm_up(config) -> None`, called while the plan is built, starts what takes seconds to be ready
    # (the processes executor's fork server, which imports torch) so that it overlaps the building of the problem.


@dataclass
class SweepPlan:
    config: SweepConfig
    model: ModelSpec
    options: ModelOptions
    grid: Grid
    configurations: list[Configuration]
    device: torch.device
    problem: ModelProblem
    checkpoint: dict[str, str] | None  # path and sha256 of the weights loaded into the problem
    executor: PlannedExecutor
    threads: ThreadChoice | None = None  # torch threads for each process that measures (None: leave torch's setting)
    # Every checkpoint, in the grid's order, with a problem of its own (the first is `problem`); empty without
    # --checkpoint.
    checkpoints: list[SweepCheckpoint] = field(default_factory=list)
    workers_reason: str | None = None  # why config.workers processes: "--workers", or the automatic choice's reason
    # The step's solves as the contract check saw them (span, sizes); a trajectory problem's is known without running.
    shape: ProblemShape = field(default_factory=lambda: ProblemShape(0.0, 1.0, 0))
    # Lines to say before running: precisions of the grid in which the step raises (their configurations will fail).
    step_warnings: list[str] = field(default_factory=list)
    # Every other file of the user's code its loading brought in, path -> sha256 (core/user_files.py): found once,
    # here; None where no model or library is the user's code.
    user_files: dict[str, str] | None = None
    # Each seed's problem where the sweep has several seeds (the first is `problem`); empty with one.
    seed_problems: dict[int, ModelProblem] = field(default_factory=dict)

    def user_specs(self) -> list[str]:
        """The model and libraries loaded from the user's code (`file.py:object`, `module:object`)."""
        return [spec for spec in [self.model.name, *(self.config.library or [])] if ":" in spec]

    def problem_for(self, key: tuple[str, int]) -> ModelProblem:
        """The problem of the configurations whose `problem_key` (checkpoint name, seed) this is."""
        checkpoint, seed = key
        if seed in self.seed_problems:
            return self.seed_problems[seed]
        return next((c.problem for c in self.checkpoints if c.name == checkpoint), self.problem)

    def problem_keys(self) -> list[tuple[str, int]]:
        """(checkpoint name, seed) of every problem the grid runs on, in the grid's order."""
        return [(checkpoint, seed) for checkpoint in self.grid.checkpoints for seed in self.grid.seeds]

    def train_iteration(self, checkpoint: str) -> int | None:
        return next((c.iteration for c in self.checkpoints if c.name == checkpoint), None)

    def noise_batch_size(self, checkpoint: str) -> int | None:
        """Points per batch of this checkpoint's gradient noise: as asked, else the batch its training drew; None where
        that is the sweep's own batch."""
        trained = next((c.train_batch for c in self.checkpoints if c.name == checkpoint), None)
        size = self.config.noise_batch_size or trained
        return None if size == problem_batch_size(ProblemCopies(self.problem), self.shape) else size

    def warnings(self) -> list[str]:
        """What to say before running: an adaptive method's rtol below a dtype's unit roundoff, a training step's
        low-precision failures, narrower values in the float64 reference, worker processes sharing a GPU."""
        dtypes = [dtype for _, dtype, _ in self.grid.triples]
        shared = shared_gpu_warning(self.device, self.config.workers or 1) if self.executor.runs_here else None
        said = [*self.step_warnings, narrow_warning(self.shape), shared]
        return [
            *tolerance_warnings(self.grid.methods, dtypes, self.grid.modes, self.config.rtol),
            *(f"warning: {line}" for line in said if line),
        ]


@dataclass(frozen=True)
class ResolvedSweep:
    """The request resolved by name, before the model is built or run: the model's factory and options, the grid, the
    checkpoint files, the data asked for, the executor, the device, and the worker processes (`config.workers` too)
    with why so many."""

    config: SweepConfig
    model: ModelSpec
    options: ModelOptions
    grid: Grid
    checkpoint_files: list[CheckpointFile]
    data: DataRequest | None
    executor: PlannedExecutor
    device: torch.device
    workers: int
    workers_reason: str | None


def make_plan(config: SweepConfig, executors: Registry[PlannedExecutor], checked: bool = False) -> SweepPlan:
    """Everything that can be wrong with the request is found here, before anything touches the disk:
    the model, its options, the data file, the checkpoint (the problem is built and the weights loaded),
    the executor and its settings. `executors`: where the executor's name is looked up (the registered executors,
    which run plans and so live above this stage). `checked`: the process that started this one (a worker's) already
    bounded the problem's memory, which for a model built on the meta device costs an import of torch._dynamo."""
    return probe_model(resolve_request(config, executors), checked)


def resolve_request(config: SweepConfig, executors: Registry[PlannedExecutor]) -> ResolvedSweep:
    """The request's names looked up and its grid built; no model is built or evaluated (a user's model or library
    named by its location is imported, to find it)."""
    model = resolve_model(config.model)
    for library in config.library or ():
        resolve_library(library)  # a user's library named by its location, in a process that has not loaded it yet
    seeds = sweep_seeds(model, config)
    options = parse_options(model, {**config.options, "seed": seeds[0]})
    grid = Grid.build(
        config.timesteps,
        config.method,
        config.mode,
        config.library,
        config.dtype,
        config.scaling,
        config.arithmetic,
        config.rounding,
        config.loss_in or [AXIS_DEFAULTS["loss_in"]],
        config.keep_float32,
        seeds,
    )
    # SweepConfig's validator has joined a list of checkpoints into one comma list.
    assert not isinstance(config.checkpoint, list)
    files = expand_checkpoints(config.checkpoint) if config.checkpoint else []
    workers = config.workers
    workers_reason = "--workers" if workers is not None else None
    if workers is None:
        if config.executor not in EXECUTORS_WITH_PROCESSES:
            workers, workers_reason = 1, f"executor {config.executor}"
        elif model.name.startswith(IN_MAIN) and config.executor is None:
            workers, workers_reason = 1, "the model is defined in __main__, which worker processes cannot import"
        else:
            workers, workers_reason = auto_workers(grid.configurations(model.name), resolve_device(config.device))
        config = config.model_copy(update={"workers": workers})
    executor = executors.get(config.executor_name)
    device = executor.target_device(config)
    data = parse_data(config.data) if config.data else None
    return ResolvedSweep(config, model, options, grid, files, data, executor, device, workers, workers_reason)


def probe_model(resolved: ResolvedSweep, checked: bool = False) -> SweepPlan:
    """The plan of a resolved request: the problem built (with its checkpoints' weights) and its step evaluated, to
    check its contract, find the precisions in which it raises, bound its memory and choose the threads.
    `checked`: as `make_plan`'s."""
    config, model, grid, executor, device = (
        resolved.config,
        resolved.model,
        resolved.grid,
        resolved.executor,
        resolved.device,
    )
    # optional: what takes seconds to start starts while the problem is built
    warm_up = getattr(executor, "warm_up", None)
    if warm_up is not None:
        warm_up(config)
    # Built here to check it and fingerprint it; where the runs happen elsewhere, this copy never runs, so the CPU will
    # do.
    build_on = device if executor.runs_here else torch.device("cpu")
    problem = build_problem(model, resolved.options, build_on, resolved.data, bound_memory=not checked)
    if config.loss_in is None:
        grid = replace(grid, loss_ins=(problem.default_loss_in,))
        config = config.model_copy(update={"loss_in": [problem.default_loss_in]})
    copies = ProblemCopies(problem)
    shape = check_contract(model.name, copies)
    if config.noise_batch_size is not None and not isinstance(problem, TrajectoryProblem):
        own = problem_batch_size(copies, shape)
        if config.noise_batch_size != own:
            raise InputError(
                f"noise_batch_size {config.noise_batch_size}: model {model.name} is a training step, whose batches "
                f"are what its sample_batch(k) gives ({f'{own} points' if own else shape.batch_size_from}); set their "
                "size with the factory's options"
            )
    step_warnings: list[str] = []
    if not checked:
        precisions = precisions_of(grid.configurations(model.name))
        step_warnings = low_precision_failures(copies, precisions, config.fp8_scaling)
    if not checked and not config.allow_oom and executor.runs_here:
        memory.check_grid_fits(list(grid.timesteps), shape.state_values, device)

    def scaled(built: ModelProblem) -> ModelProblem:
        return built.with_loss_scale(config.loss_scale) if config.loss_scale != 1.0 else built

    problem = scaled(problem)
    refuse_unmatched_modules(problem.model, grid.kept)
    seed_problems = {
        seed: problem
        if seed == resolved.options.seed
        else scaled(build_problem(model, resolved.options.model_copy(update={"seed": seed}), build_on, resolved.data))
        for seed in (grid.seeds if len(grid.seeds) > 1 else ())
    }
    checkpoints = load_checkpoints(problem, resolved.checkpoint_files, model.name)
    checkpoint = (
        {k: v for k, v in checkpoints[0].record.items() if k in ("path", "sha256")} if len(checkpoints) == 1 else None
    )
    grid = replace(grid, checkpoints=tuple(c.name for c in checkpoints) or ("",))
    threads = (
        choose_threads(evaluate_once(copies), device, config.threads, resolved.workers) if executor.runs_here else None
    )
    plan = SweepPlan(
        config=config,
        model=model,
        options=resolved.options,
        grid=grid,
        configurations=grid.configurations(model.name),
        device=device,
        problem=problem,
        checkpoint=checkpoint,
        executor=executor,
        threads=threads,
        checkpoints=checkpoints,
        workers_reason=resolved.workers_reason,
        shape=shape,
        step_warnings=step_warnings,
        seed_problems=seed_problems,
    )
    specs = plan.user_specs()
    return replace(plan, user_files=user_files(specs)) if specs else plan


def sweep_seeds(model: ModelSpec, config: SweepConfig) -> list[int]:
    """The seeds the factory builds the model with: `seeds`, else the `seed` option (one, as before the seed axis);
    both given and differing, or several seeds for a factory that takes none, is one line."""
    option = config.options.get("seed")
    if config.seeds is None:
        return [parse_options(model, config.options).seed]
    if option is not None and [parse_options(model, config.options).seed] != config.seeds:
        raise InputError(
            f"seeds {','.join(map(str, config.seeds))} and the model option seed={option} both give the seed; "
            "give --seeds alone"
        )
    if not takes_seed(model):
        raise InputError(
            f"seeds: model {model.name}'s factory takes no `seed` parameter, so every seed would build the same "
            "model; add `seed: int = 0` to its parameters and draw the weights from it"
        )
    if config.checkpoint:
        raise InputError("seeds draw the initial weights, checkpoint loads trained ones: give one of the two")
    for seed in config.seeds:
        parse_options(model, {**config.options, "seed": seed})  # the model's own range for its seed
    return config.seeds


def refuse_unmatched_modules(model: torch.nn.Module, kept: tuple[str, ...]) -> None:
    """A keep_float32 pattern that names no module of the model is a typo, found before anything runs."""
    for value in kept:
        missing = unmatched(model, value)
        if missing:
            names = [name for name, _ in model.named_modules() if name]
            listed = ", ".join(names[:12]) + (f" ... ({len(names)} in all)" if len(names) > 12 else "")
            raise InputError(
                f"keep_float32 {shortened(missing[0])!r} matches no module of the model; its modules: "
                f"{listed or 'none'}"
            )


def build_problem(
    model: ModelSpec, options: ModelOptions, device: torch.device, data, bound_memory: bool = True
) -> ModelProblem:
    """The problem, after making sure a built-in model's options fit in memory at all (a user's factory runs once
    only)."""
    if bound_memory and model.name in MODELS:
        memory.check_problem_fits(model, options, data, device)
    try:
        return model.build(options, device, data)
    except Exception as exc:  # noqa: BLE001 - only an allocation that failed is turned into a line here
        if memory.allocation_failed(exc):
            raise InputError(
                f"model {model.name} with these options does not fit in memory on {device} ({one_line(exc)})"
            ) from None
        raise


def default_out_dir(plan: SweepPlan) -> Path:
    return Path("results") / f"{file_safe(plan.model.name)}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
