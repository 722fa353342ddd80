"""`roundoff train`'s options; what it does is `roundoff_analyzer.commands.train`."""

from __future__ import annotations

from pathlib import Path

import typer

# The training's schema imports neither torch nor pandas: --help shows its defaults at once.
from roundoff_analyzer.commands import TRAIN_FIELDS, TrainRequest, train_command

from .shared_options import (
    backoff_factor_option,
    data_option,
    device_option,
    init_scale_option,
    max_retries_option,
    shown_default,
)

MODEL, TRAINING, PRECISION, WEIGHTS, OUTPUT = (
    "Model and data",
    "Training",
    "Precision",
    "Weights and optimizer",
    "Output",
)
_FIELDS = TRAIN_FIELDS


def train(
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Model to train (see `roundoff list`); required unless the config file names it.",
        rich_help_panel=MODEL,
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="TOML file with the training; options given here override it.",
        rich_help_panel=MODEL,
    ),
    option: list[str] = typer.Option(
        [],
        "--option",
        "-o",
        help="Model option key=value (repeatable).",
        show_default=False,
        rich_help_panel=MODEL,
    ),
    seed: int | None = typer.Option(
        None,
        "--seed",
        help="Seed of the initial weights and of the batch stream (the model's `seed` option).",
        show_default="0",
        rich_help_panel=MODEL,
    ),
    data: str | None = data_option(MODEL),
    iters: int | None = typer.Option(
        None,
        "--iters",
        help="Optimizer steps per setup.",
        show_default=shown_default(_FIELDS, "iters"),
        rich_help_panel=TRAINING,
    ),
    save_at: str | None = typer.Option(
        None,
        "--save-at",
        help="Iterations whose weights are saved, e.g. 0,100,500,2000 (the last is always saved).",
        show_default="0",
        rich_help_panel=TRAINING,
    ),
    resume_every: int | None = typer.Option(
        None,
        "--resume-every",
        help="Iterations between resume states (also saved at every checkpoint).",
        show_default=shown_default(_FIELDS, "resume_every"),
        rich_help_panel=TRAINING,
    ),
    lr: float | None = typer.Option(
        None,
        "--lr",
        help="The optimizer's learning rate.",
        show_default=shown_default(_FIELDS, "lr"),
        rich_help_panel=TRAINING,
    ),
    val_batches: int | None = typer.Option(
        None,
        "--val-batches",
        help="Held-out batches of the validation loss.",
        show_default=shown_default(_FIELDS, "val_batches"),
        rich_help_panel=TRAINING,
    ),
    val_every: int | None = typer.Option(
        None,
        "--val-every",
        help="Iterations between validation losses, besides those at every saved iteration.",
        show_default="saved iterations only",
        rich_help_panel=TRAINING,
    ),
    timesteps: str | None = typer.Option(
        None,
        "--timesteps",
        "-n",
        help="n_timesteps of every solve (one value).",
        show_default=shown_default(_FIELDS, "timesteps"),
        rich_help_panel=PRECISION,
    ),
    method: str | None = typer.Option(
        None,
        help="Fixed-grid method: euler, rk4 (one value).",
        show_default=shown_default(_FIELDS, "method"),
        rich_help_panel=PRECISION,
    ),
    library: str | None = typer.Option(
        None,
        help="Solver libraries, one setup each: {libraries}.",
        show_default=shown_default(_FIELDS, "library"),
        rich_help_panel=PRECISION,
    ),
    dtype: str | None = typer.Option(
        None,
        help="Dtypes, one setup each: {dtypes} (float32 is the reference).",
        show_default=shown_default(_FIELDS, "dtype"),
        rich_help_panel=PRECISION,
    ),
    scaling: str | None = typer.Option(
        None,
        help="Scalings, one setup each: {scalings}.",
        show_default=shown_default(_FIELDS, "scaling"),
        rich_help_panel=PRECISION,
    ),
    mode: str | None = typer.Option(
        None,
        help="Mode: {modes} (one value).",
        show_default=shown_default(_FIELDS, "mode"),
        rich_help_panel=PRECISION,
    ),
    weights: str | None = typer.Option(
        None,
        help=(
            "Where the weights live, one setup each: float32 (master weights), or stored in bfloat16, float16, eXmY "
            "(e.g. e8m7), the forward running on them."
        ),
        show_default=shown_default(_FIELDS, "weights"),
        rich_help_panel=WEIGHTS,
    ),
    update: str | None = typer.Option(
        None,
        help="How a step is rounded into low-precision weights, one setup each: {updates}.",
        show_default=shown_default(_FIELDS, "update"),
        rich_help_panel=WEIGHTS,
    ),
    optimizer_state: str | None = typer.Option(
        None,
        "--optimizer-state",
        help="Where the optimizer's state (Adam's moments) lives: float32, or weights (the weights' format).",
        show_default=shown_default(_FIELDS, "optimizer_state"),
        rich_help_panel=WEIGHTS,
    ),
    optimizer: str | None = typer.Option(
        None,
        "--optimizer",
        help=(
            "adam, adamw, sgd (momentum 0.9), or package.module:factory / path/to/file.py:factory, called "
            "factory(params, lr)."
        ),
        show_default=shown_default(_FIELDS, "optimizer"),
        rich_help_panel=WEIGHTS,
    ),
    clip_grad_norm: float | None = typer.Option(
        None,
        "--clip-grad-norm",
        help="Clip the unscaled gradient's norm to this (grad: after unscale_).",
        show_default="no clipping",
        rich_help_panel=TRAINING,
    ),
    init_scale: float | None = init_scale_option(PRECISION),
    backoff_factor: float | None = backoff_factor_option(PRECISION),
    max_retries: int | None = max_retries_option(PRECISION, " per step"),
    device: str | None = device_option(TRAINING, shown_default(_FIELDS, "device")),
    threads: int | None = typer.Option(
        None,
        "--threads",
        help="torch threads.",
        show_default="chosen from the problem's size",
        rich_help_panel=TRAINING,
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        help="Training folder; the same command again resumes it.",
        show_default="results/train-<model>-<date>-<time>",
        rich_help_panel=OUTPUT,
    ),
    force: bool = typer.Option(
        False,
        "--force",
        metavar="",
        help="Replace a different training found in --out.",
        show_default=False,
        rich_help_panel=OUTPUT,
    ),
) -> None:
    """Train a model with an optimizer (Adam by default) on its own loss, a fresh batch every iteration, once per
    (library, dtype, scaling, weights, update) setup.

    Every setup starts from the same weights and sees the same batches. Checkpoints (iter_<iteration>.pt, a state dict
    loadable with --checkpoint) and their metadata go to DIR/checkpoints for the first setup and
    DIR/setups/<label>/checkpoints for the others; killed and started again with the same command, the training resumes
    from its last saved state.
    """
    train_command(TrainRequest(**locals()))  # the options as given, by name
