"""`roundoff sweep`'s options; what it does is `roundoff_analyzer.commands.sweep`."""

from __future__ import annotations

from pathlib import Path

import typer

from roundoff_analyzer.commands import SLURM_TIME_FORMS, SWEEP_FIELDS, SweepRequest, sweep_command

from .shared_options import (
    backoff_factor_option,
    data_option,
    device_option,
    init_scale_option,
    max_retries_option,
    shown_default,
)

GRID, MODEL, SCALING, EXECUTION, OUTPUT = "Grid", "Model and data", "Scaling", "Execution", "Output"
# The schema imports neither torch nor pandas: --help shows its defaults at once.
_FIELDS = SWEEP_FIELDS


def sweep(
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Model to sweep (see `roundoff list`); required unless the config file names it.",
        rich_help_panel=MODEL,
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="TOML file with the sweep; options given here override it.",
        rich_help_panel=MODEL,
    ),
    timesteps: str | None = typer.Option(
        None,
        "--timesteps",
        "-n",
        help=(
            "n_timesteps values: equal time steps of each solve (on [0, 1] for a model of (func, y0, loss); across "
            "each solve's span for a model given as a training step)."
        ),
        show_default=shown_default(_FIELDS, "timesteps"),
        rich_help_panel=GRID,
    ),
    method: str | None = typer.Option(
        None,
        help="Methods: {methods}.",
        show_default=shown_default(_FIELDS, "method"),
        rich_help_panel=GRID,
    ),
    library: str | None = typer.Option(
        None,
        help="Solver libraries: {libraries}; or your own as package.module:object or path/to/file.py:object.",
        show_default="the default grid",
        rich_help_panel=GRID,
    ),
    dtype: str | None = typer.Option(
        None,
        help="Low-precision dtypes: {dtypes}.",
        show_default="the default grid",
        rich_help_panel=GRID,
    ),
    scaling: str | None = typer.Option(
        None,
        help="Scaling strategies: {scalings}.",
        show_default="the default grid",
        rich_help_panel=GRID,
    ),
    mode: str | None = typer.Option(
        None,
        help="Modes: {modes}.",
        show_default=shown_default(_FIELDS, "mode"),
        rich_help_panel=GRID,
    ),
    loss_in: str | None = typer.Option(
        None,
        "--loss-in",
        help=(
            "Where the loss is formed: {loss_placements} (float32: after the solve, outside autocast; autocast: "
            "inside it, as most training scripts write it; for a model given as a training step, float32 puts its "
            "solves alone under autocast, autocast the whole step)."
        ),
        show_default="float32; autocast for a model given as a training step",
        rich_help_panel=GRID,
    ),
    option: list[str] = typer.Option(
        [],
        "--option",
        "-o",
        help="Model option key=value (repeatable; `roundoff list` shows each model's).",
        show_default=False,
        rich_help_panel=MODEL,
    ),
    seeds: str | None = typer.Option(
        None,
        "--seeds",
        help=(
            "Seeds the model is built with, comma-separated (e.g. 0,1,2): the grid runs on each initialisation, "
            "against its own references, and the verdict judges each setup on its worst seed."
        ),
        show_default="one: the model option seed, 0 unless -o seed=N",
        rich_help_panel=MODEL,
    ),
    data: str | None = data_option(MODEL),
    checkpoint: str | None = typer.Option(
        None,
        "--checkpoint",
        help=(
            "Trained weights: a state-dict file, a `roundoff train` folder (each of its checkpoints: the grid runs "
            "once per checkpoint), or a comma list of both."
        ),
        show_default="random weights from the seed",
        rich_help_panel=MODEL,
    ),
    loss_scale: float | None = typer.Option(
        None,
        "--loss-scale",
        help="Multiply the loss by this (e.g. 1e-10 to study underflow).",
        show_default=shown_default(_FIELDS, "loss_scale"),
        rich_help_panel=SCALING,
    ),
    init_scale: float | None = init_scale_option(SCALING),
    backoff_factor: float | None = backoff_factor_option(SCALING),
    max_retries: int | None = max_retries_option(SCALING, ""),
    device: str | None = device_option(EXECUTION, shown_default(_FIELDS, "device")),
    repeats: int | None = typer.Option(
        None,
        help="Runs per configuration (determinism check).",
        show_default=shown_default(_FIELDS, "repeats"),
        rich_help_panel=EXECUTION,
    ),
    timeout: float | None = typer.Option(
        None,
        help="Time limit per configuration, in seconds.",
        show_default="none",
        rich_help_panel=EXECUTION,
    ),
    executor: str | None = typer.Option(
        None,
        "--executor",
        help="Where configurations run: {executors}.",
        show_default="processes with more than one worker, else local",
        rich_help_panel=EXECUTION,
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="Worker processes on this machine (implies --executor processes).",
        show_default="one per core for a CPU grid of 2,000 or more right-hand-side evaluations, else 1",
        rich_help_panel=EXECUTION,
    ),
    slurm_partition: str | None = typer.Option(
        None,
        "--slurm-partition",
        help="slurm: partition of the array's tasks.",
        show_default="the cluster's default",
        rich_help_panel=EXECUTION,
    ),
    slurm_time: str | None = typer.Option(
        None,
        "--slurm-time",
        help=f"slurm: time limit per task ({SLURM_TIME_FORMS}).",
        show_default="the partition's",
        rich_help_panel=EXECUTION,
    ),
    slurm_gpus_per_task: int | None = typer.Option(
        None,
        "--slurm-gpus-per-task",
        help="slurm: GPUs per task.",
        show_default="none",
        rich_help_panel=EXECUTION,
    ),
    slurm_option: list[str] = typer.Option(
        [],
        "--slurm-option",
        help="slurm: another sbatch option key=value, or a bare flag (repeatable).",
        show_default=False,
        rich_help_panel=EXECUTION,
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        help="Results folder; the same folder again resumes the sweep.",
        show_default="results/<model>-<date>-<time>",
        rich_help_panel=OUTPUT,
    ),
    force: bool = typer.Option(
        False,
        "--force",
        metavar="",
        help="Replace a different sweep found in --out.",
        show_default=False,
        rich_help_panel=OUTPUT,
    ),
    no_report: bool = typer.Option(
        False,
        "--no-report",
        metavar="",
        help="Do not write report.md and figures/ at the end.",
        show_default=False,
        rich_help_panel=OUTPUT,
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        help="torch threads per process.",
        show_default="1, or the process's share of the cores when the problem's largest matrix product is large",
        rich_help_panel=EXECUTION,
    ),
    noise_batches: int | None = typer.Option(
        None,
        "--noise-batches",
        help="Batches of the model's data for the gradient noise (0 skips it).",
        show_default=shown_default(_FIELDS, "noise_batches"),
        rich_help_panel=MODEL,
    ),
    noise_batch_size: int | None = typer.Option(
        None,
        "--noise-batch-size",
        help="Points per batch of the gradient noise: the batch you train with (the noise shrinks as it grows).",
        show_default="the batch a --checkpoint's training drew, else the sweep's batch",
        rich_help_panel=MODEL,
    ),
    rtol: float | None = typer.Option(
        None,
        "--rtol",
        help="Adaptive methods (dopri5, tsit5): relative tolerance.",
        show_default=shown_default(_FIELDS, "rtol"),
        rich_help_panel=GRID,
    ),
    atol: float | None = typer.Option(
        None,
        "--atol",
        help="Adaptive methods: absolute tolerance.",
        show_default=shown_default(_FIELDS, "atol"),
        rich_help_panel=GRID,
    ),
    max_steps: int | None = typer.Option(
        None,
        "--max-steps",
        help="Adaptive methods: steps a solve may attempt.",
        show_default=shown_default(_FIELDS, "max_steps"),
        rich_help_panel=GRID,
    ),
    arithmetic: str | None = typer.Option(
        None,
        help="Arithmetic: {arithmetics} (default: each dtype's own: emulated for fp8 and eXmY, else hardware).",
        rich_help_panel=GRID,
    ),
    rounding: str | None = typer.Option(
        None,
        help="Rounding of emulated arithmetic: {roundings} (default nearest).",
        rich_help_panel=GRID,
    ),
    fp8_scaling: bool | None = typer.Option(
        None,
        "--fp8-scaling/--no-fp8-scaling",
        metavar="",
        help="Emulated 8-bit formats: per-tensor power-of-two scaling of matmul inputs and outputs (default on).",
        rich_help_panel=SCALING,
    ),
    allow_oom: bool | None = typer.Option(
        None,
        "--allow-oom",
        metavar="",
        help="Run a grid whose estimated memory is far beyond the device's, recording what cannot fit as oom rows.",
        rich_help_panel=EXECUTION,
    ),
    keep_float32: str | None = typer.Option(
        None,
        "--keep-float32",
        help=(
            "Modules of the vector field run in float32 out of autocast, as a grid axis: none, or module names or glob "
            "patterns joined with + (e.g. potential.layers.0, '*norm*'); several values separated by commas."
        ),
        show_default="none",
        rich_help_panel=GRID,
    ),
    per_module: bool | None = typer.Option(
        None,
        "--per-module",
        metavar="",
        help=(
            "Measure each module of the vector field per time step, forward and backward: range "
            "and local roundoff (modules.parquet; one extra, untimed run per configuration)."
        ),
        rich_help_panel=OUTPUT,
    ),
    cpu_memory: bool | None = typer.Option(
        None,
        "--cpu-memory",
        metavar="",
        help="On the CPU, measure peak memory too (one extra, untimed run per configuration).",
        rich_help_panel=EXECUTION,
    ),
    no_timing: bool | None = typer.Option(
        None,
        "--no-timing",
        metavar="",
        help=(
            "Do not time the setups the answer compares again after the sweep (timing.parquet: interleaved, at least "
            "5 repeats, within about 10% of the sweep's time); the answer's cost is then each run's single timing."
        ),
        rich_help_panel=OUTPUT,
    ),
) -> None:
    """Run a model's ODE over n_timesteps x method x library x dtype x scaling x mode, against a float64 reference.

    Without --library, --dtype and --scaling, each (n_timesteps, method) runs the seven (library, dtype, scaling)
    triples of the default grid: bfloat16 without scaling on torchdiffeq and on native; float16 on torchdiffeq with none
    and grad; float16 on native with none, grad and dynamic. Naming any of these three axes sweeps the full product of
    the axes named (the others take all their values).
    """
    sweep_command(SweepRequest(**locals()))  # the options as given, by name
