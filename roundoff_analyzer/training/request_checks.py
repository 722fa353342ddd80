"""Everything that can be wrong with a training request is found here, before anything is printed or written."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..axes.arithmetics import ARITHMETICS
from ..axes.data import parse_data
from ..axes.dtypes import DTYPES
from ..axes.grid import file_safe
from ..axes.models import ModelOptions, ModelProblem, ModelSpec, parse_options, resolve_model
from ..axes.modes import ProblemCopies
from ..core.devices import resolve_device
from ..core.errors import InputError
from ..core.safe_files import out_folder
from ..core.threads import ThreadChoice, choose_threads
from ..measuring.contract import evaluate_once
from ..planning.manifest import problem_hash
from ..planning.sweep_plan import build_problem
from .config import TrainConfig, resolve, save_points
from .files import load_resume
from .folder import check_folder, setup_folder
from .held_out import VALIDATION_METHOD
from .optimizers import OptimizerSpec, resolve_optimizer
from .setups import TrainSetup, choose_setups
from .stream import BatchStream, batch_stream


@dataclass
class TrainPlan:
    config: TrainConfig
    model: ModelSpec
    options: ModelOptions
    problem: ModelProblem  # its model holds the initial weights until training starts
    setups: list[TrainSetup]  # the reference first
    left_out: list[str]
    save_at: list[int]
    stream: BatchStream
    device: torch.device
    threads: ThreadChoice
    out: Path
    force: bool
    resumable: dict | None  # the manifest of the same training found in `out`
    optimizer: OptimizerSpec
    added: list[str] = field(default_factory=list)  # "<label>: why", the reference where it was not asked for

    @property
    def fingerprint(self) -> dict:
        return fingerprint(self.config, self.options, self.problem, self.setups[0], self.device, self.optimizer)


def fingerprint(
    config: TrainConfig,
    options: ModelOptions,
    problem: ModelProblem,
    reference: TrainSetup,
    device: torch.device,
    optimizer: OptimizerSpec,
) -> dict:
    """What decides the weights of every setup; `iters`, `save_at` and further setups may change and the training
    resumes. Adam without clipping, which every training before those settings existed used, adds nothing (such folders
    resume)."""
    later = {
        **({"optimizer": optimizer.record()} if optimizer.name != "adam" else {}),
        **({"clip_grad_norm": config.clip_grad_norm} if config.clip_grad_norm is not None else {}),
    }
    return {
        **later,
        "model": config.model,
        "options": options.model_dump(mode="json"),
        "data": config.data,
        "problem_sha256": problem_hash(problem),
        "lr": config.lr,
        "method": config.method,
        "n_timesteps": config.timesteps,
        "mode": config.mode,
        "val_batches": config.val_batches,
        "scaler": config.scaler.model_dump(mode="json"),
        "reference_setup": reference.setup_label,
        "device": device.type,
        "validation": f"float32 native {VALIDATION_METHOD}",
    }


def option_strings(options: ModelOptions) -> dict[str, str]:
    """Options as `-o key=value` would give them: lists comma-separated, booleans as true/false."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, (list, tuple)):
            return ",".join(text(v) for v in value)
        return str(value)

    return {key: text(value) for key, value in options.model_dump(mode="json").items()}


def plan_training(
    config_file: str | Path | None, overrides: dict[str, Any], out: str | Path | None, force: bool
) -> TrainPlan:
    config = resolve(config_file, overrides)
    model = resolve_model(config.model)
    options = parse_options(model, config.options)
    choice = choose_setups(config)
    optimizer = resolve_optimizer(config.optimizer)
    device = resolve_device(config.device)
    for setup in choice.setups:
        dtype = DTYPES.get(setup.dtype)
        reason = ARITHMETICS.get(setup.arithmetic).unsupported_reason(dtype, device)
        if reason:
            raise InputError(f"setup {setup.setup_label} cannot run on {device}: {reason}")
    problem = build_problem(model, options, device, parse_data(config.data) if config.data else None)
    stream = batch_stream(problem, model.name, config.val_batches, config.iters)
    threads = choose_threads(evaluate_once(ProblemCopies(problem)), device, config.threads)
    folder = (
        out_folder(out)
        or Path("results") / f"train-{file_safe(model.name)}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    resumable = check_folder(folder, fingerprint(config, options, problem, choice.setups[0], device, optimizer), force)
    if resumable is not None:
        _refuse_shorter(folder, choice.setups, config.iters)
    return TrainPlan(
        config,
        model,
        options,
        problem,
        choice.setups,
        choice.left_out,
        save_points(config),
        stream,
        device,
        threads,
        folder,
        force,
        resumable,
        optimizer,
        choice.added,
    )


def _refuse_shorter(folder: Path, setups: list[TrainSetup], iters: int) -> None:
    """A folder whose setups trained past `iters` already: going back is not resuming."""
    for index, setup in enumerate(setups):
        state = load_resume(folder / setup_folder(index, setup.setup_label))
        if state is not None and state["iteration"] > iters:
            raise InputError(
                f"output folder '{folder}' holds setup {setup.setup_label} trained to iteration {state['iteration']}, "
                f"past --iters {iters}; give --iters {state['iteration']} or more, another --out, or --force"
            )
