"""`roundoff sweep`: run the grid, write Parquet, print the table."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from roundoff_analyzer import api
from roundoff_analyzer import config as sweep_config
from roundoff_analyzer import sweep as sweeping
from roundoff_analyzer.models import parse_option_pairs
from roundoff_analyzer.report import REPORT

from .common import reports_input_errors, split_ints, split_list, stderr, wide_console
from .interrupts import report_incomplete, report_interrupted, stop_after_current
from .progress import RichProgress
from .tables import results_table


@reports_input_errors
def sweep(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model to sweep (see `roundoff list`)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML file with the sweep; flags override it."),
    timesteps: Optional[str] = typer.Option(None, "--timesteps", "-n", help="n_timesteps values, e.g. 8,16,32."),
    method: Optional[str] = typer.Option(None, help="Methods, e.g. euler,rk4."),
    library: Optional[str] = typer.Option(None, help="Libraries, e.g. torchdiffeq,native."),
    dtype: Optional[str] = typer.Option(None, help="Low-precision dtypes, e.g. float16,bfloat16."),
    scaling: Optional[str] = typer.Option(None, help="Scaling strategies, e.g. none,grad,dynamic."),
    mode: Optional[str] = typer.Option(None, help="Modes: autocast, pure."),
    option: list[str] = typer.Option([], "--option", "-o", help="Model option key=value (repeatable)."),
    data: Optional[str] = typer.Option(
        None, "--data", help="Data: synthetic, 2spirals, 8gaussians or bsds300:PATH[?split=train|validation|test]."
    ),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="Trained weights (a state dict) for the model."),
    device: Optional[str] = typer.Option(None, help="auto, cpu or cuda."),
    repeats: Optional[int] = typer.Option(None, help="Runs per configuration (determinism check)."),
    timeout: Optional[float] = typer.Option(None, help="Time limit per configuration, in seconds."),
    loss_scale: Optional[float] = typer.Option(None, "--loss-scale", help="Multiply the loss by this (e.g. 1e-10 to study underflow)."),
    init_scale: Optional[float] = typer.Option(None, "--init-scale", help="grad: initial loss scale (default 65536)."),
    backoff_factor: Optional[float] = typer.Option(None, "--backoff-factor", help="grad: scale factor after a non-finite gradient (0.5)."),
    max_retries: Optional[int] = typer.Option(None, "--max-retries", help="grad: backward retries; dynamic: halvings per step (30)."),
    executor: Optional[str] = typer.Option(None, "--executor", help="Where configurations run: local, processes or slurm."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes on this machine (implies --executor processes)."),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="slurm: partition of the array's tasks."),
    slurm_time: Optional[str] = typer.Option(None, "--slurm-time", help="slurm: time limit per task (minutes or HH:MM:SS)."),
    slurm_gpus_per_task: Optional[int] = typer.Option(None, "--slurm-gpus-per-task", help="slurm: GPUs per task."),
    slurm_option: list[str] = typer.Option([], "--slurm-option", help="slurm: another sbatch option key=value, or a bare flag (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Results folder (default: a new folder under results/)."),
    force: bool = typer.Option(False, "--force", help="Replace a different sweep found in --out."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.md and figures/ at the end."),
    threads: Optional[int] = typer.Option(
        None, "--threads", help="torch threads per process (default: 1, or this process's cores when the largest matmul is big)."
    ),
) -> None:
    """Run a model's ODE over timesteps x method x library x dtype x scaling x mode against a float64 reference.

    Without --library, --dtype and --scaling, the grid is seed 000's seven (library, dtype, scaling) pairs per
    (n_timesteps, method); naming any of them sweeps the full product of the named axes.
    """
    console = wide_console()
    overrides = {
        "model": model,
        "options": parse_option_pairs(option) if option else None,
        "data": data,
        "checkpoint": checkpoint,
        "timesteps": split_ints(timesteps, "timesteps"),
        "method": split_list(method, "method"),
        "library": split_list(library, "library"),
        "dtype": split_list(dtype, "dtype"),
        "scaling": split_list(scaling, "scaling"),
        "mode": split_list(mode, "mode"),
        "device": device,
        "repeats": repeats,
        "timeout": timeout,
        "loss_scale": loss_scale,
        "scaler": {k: v for k, v in {"init_scale": init_scale, "backoff_factor": backoff_factor, "max_retries": max_retries}.items()
                   if v is not None} or None,
        "executor": executor,
        "workers": workers,
        "slurm": {k: v for k, v in {"partition": slurm_partition, "time": slurm_time, "gpus_per_task": slurm_gpus_per_task,
                                    "options": sweep_config.parse_sbatch_options(slurm_option) or None}.items() if v is not None} or None,
        "threads": threads,
    }
    planned = api.plan_sweep(config=config, out=out, force=force, **{k: v for k, v in overrides.items() if v is not None})
    plan, out_dir = planned.plan, planned.out
    console.print(
        f"[bold]{plan.model.name}[/] {plan.options.model_dump()} on {plan.device}: {plan.grid.describe()} -> {out_dir}",
        highlight=False,
    )
    console.print(f"data: {plan.problem.data_source}", highlight=False, markup=False)
    try:
        with RichProgress(console) as progress, stop_after_current(console) as stop_requested:
            result = api.run_sweep(planned, force=force, report=not no_report, progress=progress, stop_requested=stop_requested)
    except sweeping.SweepInterrupted as stopped:
        report_interrupted(stderr, stopped)
    except sweeping.SweepIncomplete as incomplete:
        report_incomplete(stderr, incomplete)
    except KeyboardInterrupt:
        # A second Ctrl-C after the configurations had stopped, while the tables were being rebuilt: rebuild them again.
        report_interrupted(stderr, sweeping.tables_after_interrupt(plan, out_dir))
    outcome = result.run
    console.print(results_table(result.results, title=f"{plan.model.name}: error against the float64 reference"))
    counts = result.results["status"].value_counts().to_dict()
    console.print(
        f"{len(result.results)} configurations ({', '.join(f'{v} {k}' for k, v in counts.items())}) in "
        f"{outcome.wall_seconds:.1f} s; {outcome.reference_solves} reference solves; results: {out_dir / 'results.parquet'}",
        highlight=False,
    )
    if not no_report:
        console.print(f"report: {out_dir / REPORT}", highlight=False)
