"""`roundoff train`: train a model with Adam in one or more precisions and save checkpoints a sweep can load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ..core.breakpoints import inert_breakpoints
from ..core.errors import InputError
from ..core.text import printable

# The training's schema imports neither torch nor pandas: --help shows its defaults at once.
from ..training.config import TrainConfig
from .interrupts import StopRequests, stop_after_current
from .terminal import (
    given_only,
    model_options,
    reports_input_errors,
    scaler_settings,
    split_ints,
    split_list,
    stderr,
    wide_console,
)
from .train_progress import TrainRichProgress

if TYPE_CHECKING:
    from ..training.request_checks import TrainPlan

TRAIN_FIELDS = TrainConfig.model_fields


@dataclass(frozen=True)
class TrainRequest:
    """`roundoff train`'s options as given (None: not given), one field per option."""

    model: str | None
    config: Path | None
    option: list[str]
    seed: int | None
    data: str | None
    iters: int | None
    save_at: str | None
    resume_every: int | None
    lr: float | None
    val_batches: int | None
    val_every: int | None
    timesteps: str | None
    method: str | None
    library: str | None
    dtype: str | None
    scaling: str | None
    mode: str | None
    weights: str | None
    update: str | None
    optimizer_state: str | None
    optimizer: str | None
    clip_grad_norm: float | None
    init_scale: float | None
    backoff_factor: float | None
    max_retries: int | None
    device: str | None
    threads: int | None
    out: str | None
    force: bool


def _single_int(value: str | None, what: str) -> int | None:
    values = split_ints(value, what)
    if values is not None and len(values) != 1:
        raise InputError(f"--{what} '{value}' takes one value; every setup trains on the same grid")
    return values[0] if values else None


def settings(request: TrainRequest) -> dict[str, Any]:
    """The request as a training config's keys (its lists split and checked, in this order), those not given left
    out; the model and the config file are not among them."""
    options = model_options(request.option) or {}
    if request.seed is not None:
        options["seed"] = str(request.seed)
    keys: dict[str, Any] = {
        "options": options or None,
        "data": request.data,
        "iters": request.iters,
        "save_at": split_ints(request.save_at, "save-at"),
        "resume_every": request.resume_every,
        "lr": request.lr,
        "val_batches": request.val_batches,
        "val_every": request.val_every,
        "timesteps": _single_int(request.timesteps, "timesteps"),
        "method": request.method,
        "library": split_list(request.library, "library"),
        "dtype": split_list(request.dtype, "dtype"),
        "scaling": split_list(request.scaling, "scaling"),
        "mode": request.mode,
        "device": request.device,
        "threads": request.threads,
        "weights": split_list(request.weights, "weights"),
        "update": split_list(request.update, "update"),
        "optimizer_state": request.optimizer_state,
        "optimizer": request.optimizer,
        "clip_grad_norm": request.clip_grad_norm,
        "scaler": scaler_settings(request.init_scale, request.backoff_factor, request.max_retries),
    }
    return given_only(keys)


@reports_input_errors
@inert_breakpoints()  # from the model's first evaluation (the plan checks it) to the last iteration
def train_command(request: TrainRequest) -> None:
    """Train the setups the request asks for, printing the plan, each setup's progress and the summary."""
    console = wide_console()
    given = settings(request)
    # Here, not at the top, and after the lists above are checked: torch and pandas load only when a training runs.
    from .. import training
    from ..training.folder import LOG, REPORT, SUMMARY

    plan = training.plan(request.model, config=request.config, out=request.out, force=request.force, **given)
    _print_plan(console, plan)
    stop = StopRequests()
    try:
        with TrainRichProgress(console) as progress, stop_after_current(console, "the iteration in progress", stop):
            result = training.run(plan, progress=progress, stop_requested=stop)
    except training.TrainingInterrupted as stopped:
        stderr.print(f"interrupted: {stopped}; run the same command again to resume", highlight=False, markup=False)
        raise SystemExit(stop.exit_code) from None
    except KeyboardInterrupt:  # a second Ctrl-C: the last resume state written stays
        stderr.print(
            f"interrupted: the last saved state of each setup is in {printable(plan.out)}; run the same command again "
            "to resume",
            highlight=False,
            markup=False,
        )
        raise SystemExit(stop.exit_code) from None
    from .tables import print_training_summary

    print_training_summary(console, result.summary)
    console.print(
        f"log: {result.folder / LOG}; summary: {result.folder / SUMMARY}; report: {result.folder / REPORT}",
        highlight=False,
        markup=False,
    )


def _print_plan(console: Console, plan: TrainPlan) -> None:
    console.print(
        f"[bold]{escape(printable(plan.model.name))}[/] {escape(printable(plan.options.model_dump()))} on "
        f"{plan.device}: {len(plan.setups)} setup(s) x "
        f"{plan.config.iters} "
        f"iterations, checkpoints at {','.join(map(str, plan.save_at))} -> {escape(printable(plan.out))}",
        highlight=False,
    )
    console.print(
        f"data: {plan.problem.data_source}; setups: {', '.join(s.setup_label for s in plan.setups)}",
        highlight=False,
        markup=False,
    )
    for entry in plan.left_out:
        console.print(f"left out: {entry}", highlight=False, markup=False)
    for entry in plan.added:
        console.print(f"added: {entry}", highlight=False, markup=False)
