"""`roundoff sweep`: run the grid, write Parquet, print the table."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ..core.breakpoints import inert_breakpoints
from ..core.text import printable
from ..execution.start_method import warm_up_workers
from ..planning.config import SLURM_TIME_FORMS, SweepConfig, load_toml, parse_sbatch_options
from ..planning.workers import may_use_processes
from .interrupts import (
    StopRequests,
    report_environment_failure,
    report_incomplete,
    report_interrupted,
    stop_after_current,
)
from .judgement import print_judgement
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

if TYPE_CHECKING:
    from ..api import PlannedSweep, SweepResult

# The schema imports neither torch nor pandas: --help shows its defaults at once.
SWEEP_FIELDS = SweepConfig.model_fields
SLURM_TIME_FORMS = SLURM_TIME_FORMS


@dataclass(frozen=True)
class SweepRequest:
    """`roundoff sweep`'s options as given (None: not given), one field per option."""

    model: str | None
    config: Path | None
    timesteps: str | None
    method: str | None
    library: str | None
    dtype: str | None
    scaling: str | None
    mode: str | None
    loss_in: str | None
    option: list[str]
    data: str | None
    checkpoint: str | None
    loss_scale: float | None
    init_scale: float | None
    backoff_factor: float | None
    max_retries: int | None
    device: str | None
    repeats: int | None
    timeout: float | None
    executor: str | None
    workers: int | None
    slurm_partition: str | None
    slurm_time: str | None
    slurm_gpus_per_task: int | None
    slurm_option: list[str]
    out: str | None
    force: bool
    no_report: bool
    threads: int | None
    noise_batches: int | None
    noise_batch_size: int | None
    rtol: float | None
    atol: float | None
    max_steps: int | None
    arithmetic: str | None
    rounding: str | None
    fp8_scaling: bool | None
    allow_oom: bool | None
    keep_float32: str | None
    per_module: bool | None
    cpu_memory: bool | None
    no_timing: bool | None = None
    seeds: str | None = None


def settings(request: SweepRequest) -> dict[str, Any]:
    """The request as a config file's keys (its lists split and checked, in this order), those not given left out."""
    keys: dict[str, Any] = {
        "model": request.model,
        "options": model_options(request.option),
        "seeds": split_ints(request.seeds, "seeds"),
        "data": request.data,
        "checkpoint": request.checkpoint,
        "timesteps": split_ints(request.timesteps, "timesteps"),
        "method": split_list(request.method, "method"),
        "library": split_list(request.library, "library"),
        "dtype": split_list(request.dtype, "dtype"),
        "scaling": split_list(request.scaling, "scaling"),
        "mode": split_list(request.mode, "mode"),
        "loss_in": split_list(request.loss_in, "loss_in"),
        "arithmetic": split_list(request.arithmetic, "arithmetic"),
        "rounding": split_list(request.rounding, "rounding"),
        "fp8_scaling": request.fp8_scaling,
        "device": request.device,
        "repeats": request.repeats,
        "timeout": request.timeout,
        "cpu_memory": request.cpu_memory,
        "timing": False if request.no_timing else None,
        "allow_oom": request.allow_oom,
        "keep_float32": split_list(request.keep_float32, "keep-float32"),
        "per_module": request.per_module,
        "loss_scale": request.loss_scale,
        "noise_batches": request.noise_batches,
        "noise_batch_size": request.noise_batch_size,
        "scaler": scaler_settings(request.init_scale, request.backoff_factor, request.max_retries),
        "executor": request.executor,
        "workers": request.workers,
        "slurm": given_only(
            {
                "partition": request.slurm_partition,
                "time": request.slurm_time,
                "gpus_per_task": request.slurm_gpus_per_task,
                "options": parse_sbatch_options(request.slurm_option) or None,
            }
        )
        or None,
        "threads": request.threads,
        "rtol": request.rtol,
        "atol": request.atol,
        "max_steps": request.max_steps,
    }
    return given_only(keys)


@reports_input_errors
# from the model's first evaluation (the plan checks it) to the last row: nobody sits at a pdb prompt
@inert_breakpoints()
def sweep_command(request: SweepRequest) -> None:
    """Run the sweep the request asks for, printing its plan, its progress, its table, verdict and answer."""
    started = time.monotonic()
    console = wide_console()
    given = settings(request)
    # A sweep that may run in worker processes starts their fork server first: it imports torch on a core of its own
    # while this process imports torch, pandas and matplotlib below (planning then decides whether it is used). It is
    # judged on the settings as given, since validating them imports torch.
    if may_use_processes({**(load_toml(request.config) if request.config else {}), **given}):
        warm_up_workers()
    # Here, not at the top, and after the lists above are checked: torch, pandas and matplotlib load only when a sweep
    # runs.
    from .. import api

    planned = api.plan_sweep(
        config=request.config, out=request.out, force=request.force, source="command line", **given
    )
    _print_plan(console, planned)
    result = _run(console, planned, request)
    _print_results(console, planned, result, started, report=not request.no_report)


def _print_plan(console: Console, planned: PlannedSweep) -> None:
    plan, out_dir = planned.plan, planned.out
    console.print(
        f"[bold]{escape(printable(plan.model.name))}[/] {escape(printable(plan.options.model_dump()))} on "
        f"{plan.device}: {plan.grid.describe()} -> "
        f"{escape(printable(out_dir))}",
        highlight=False,
    )
    console.print(f"data: {plan.problem.data_source}", highlight=False, markup=False)
    if plan.problem.form == "step":
        console.print(plan.shape.describe(), highlight=False, markup=False)
    for line in plan.warnings():
        stderr.print(line, highlight=False, markup=False)
    if plan.threads:
        console.print(
            f"torch threads: {plan.threads.threads} per process ({plan.threads.reason})", highlight=False, markup=False
        )


def _run(console: Console, planned: PlannedSweep, request: SweepRequest) -> SweepResult:
    """The sweep run with a progress bar; a stop, configurations left without a result or a failure of the machine end
    the command (with how to go on)."""
    from .. import api
    from ..execution import engine
    from ..execution.progress_bar import RichProgress

    stop = StopRequests()
    try:
        with RichProgress(console) as progress, stop_after_current(console, stop=stop):
            return api.run_sweep(
                planned, force=request.force, report=not request.no_report, progress=progress, stop_requested=stop
            )
    except engine.SweepInterrupted as stopped:
        report_interrupted(stderr, stopped, stop.exit_code)
    except engine.SweepIncomplete as incomplete:
        report_incomplete(stderr, incomplete)
    except engine.EnvironmentFailure as failure:
        report_environment_failure(stderr, failure)
    except KeyboardInterrupt:
        # A second Ctrl-C after the configurations had stopped, while the tables were being rebuilt: rebuild them again.
        report_interrupted(stderr, engine.tables_after_interrupt(planned.plan, planned.out), stop.exit_code)


def _print_results(console: Console, planned: PlannedSweep, result: SweepResult, started: float, report: bool) -> None:
    """The table, the verdict and the answer, one line of counts and times, and where the report is."""
    from ..report import REPORT
    from .tables import results_table

    name, out_dir, outcome = planned.plan.model.name, planned.out, result.run
    assert outcome is not None  # a sweep that ran says how (only a folder opened with `load` has no run)
    console.print(
        results_table(result.results, title=f"{escape(printable(name))}: error against the float64 reference")
    )
    print_judgement(console, result.results, out_dir)
    counts = result.results["status"].value_counts().to_dict()
    timed = result.manifest.get("timing_pass_s")
    timing = f", {timed:.1f} s timing the answer again" if outcome.n_run and isinstance(timed, (int, float)) else ""
    console.print(
        f"{len(result.results)} configurations ({', '.join(f'{v} {k}' for k, v in counts.items())}); the command took "
        f"{time.monotonic() - started:.1f} s, {outcome.wall_seconds:.1f} s of it running configurations{timing}; "
        f"{outcome.reference_solves} reference solves; results: {escape(printable(out_dir / 'results.parquet'))}",
        highlight=False,
        soft_wrap=True,  # one line, whatever the terminal's width: scripts and tests read it
    )
    if report:
        console.print(f"report: {printable(out_dir / REPORT)}", highlight=False, markup=False)
