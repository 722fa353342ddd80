"""The Python API, for notebooks and scripts: run a sweep or open a finished one, and get its tables and
figures as Python objects. The `roundoff` command is a thin layer over these functions.

    import roundoff_analyzer as ra
    result = ra.sweep(model="otflow", timesteps=[8, 32], dtype="float16", scaling=["none", "grad"])
    result.results                 # one row per configuration (results.parquet)
    result.answers["float16"]      # the answer as data: the setup to train with, the numbers behind it, the code
    result.verdicts                # per dtype × library (× mode, × loss placement): the label and its numbers
    result.figures()["error_grad_params"]
    ra.load("results/otflow-20260101-120000")
    problem = ra.model("otflow", hidden=32)    # what a sweep of that model measures: its model, loss and batches
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .axes.grid import Configuration
from .axes.models.factory import FORMS as MODEL_FORMS
from .core.breakpoints import inert_breakpoints
from .core.errors import InputError
from .core.safe_files import out_folder
from .core.user_code import function_spec
from .execution import engine
from .execution.base import Progress
from .execution.timing_pass import TIME_SHARE, time_setups
from .judging.timed_cost import setups_to_time
from .planning.config import SweepConfig, list_valued_keys, resolve
from .planning.manifest import fingerprint
from .planning.sweep_plan import SweepPlan
from .report import SweepFolder, read_sweep_folder, write_report
from .report.answer_data import answer_records, verdict_records
from .report.checkpoint_scope import judged_rows
from .storage.result_schemas import TIMING
from .storage.results import ResultStore

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .axes.models.problem import ModelProblem

# Keys whose value is a list in a config file: a single value is taken as a list of one in Python.
_LIST_KEYS = list_valued_keys(SweepConfig)


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its folder and what the folder holds, read back from the Parquet tables.

    Returned by `sweep` and `load`; the report's answer, verdicts and figures are computed from these tables.

    Attributes:
        folder: The results folder.
        results: `results.parquet`, one row per configuration (the columns: docs "Results on disk").
        manifest: `manifest.json`: the grid, the model, the device, the versions, how it was run.
        param_errors: `param_errors.parquet`, each parameter's gradient error; None when the folder has none.
        profile: `profile.parquet`, the largest state and adjoint per time step; None when the folder has none.
        modules: `modules.parquet`, each module's range and local roundoff (a sweep with `per_module=True`);
            else None.
        part_errors: `part_errors.parquet`, the errors of each part where a quantity has several (the parameter
            gradient of each top-level submodule, each part of a tuple state); else None.
        run: How the run went (reference solves, wall time); None for a folder opened with `load`.

    Example:
        ```python
        result = ra.load("results/otflow-20260101-120000")
        result.results.groupby("dtype")["grad_params_rel_err"].max()
        ```
    """

    folder: Path
    results: pd.DataFrame
    manifest: dict[str, Any]
    param_errors: pd.DataFrame | None
    profile: pd.DataFrame | None
    modules: pd.DataFrame | None = None
    part_errors: pd.DataFrame | None = None
    timing: pd.DataFrame | None = None
    run: engine.SweepOutcome | None = field(default=None, kw_only=True)

    def figures(self) -> dict[str, Figure]:
        """The report's figures as matplotlib Figures, by name.

        Returns:
            The figures by name: `error_solution`, `error_grad_y0`, `error_grad_params`; `adjoint_range` when the
                profile has a backward pass, `along_training` for a sweep over several checkpoints. Show one in a
                notebook by leaving it last in a cell.

        Example:
            ```python
            ra.load("results/otflow-fp16").figures()["error_grad_params"]
            ```
        """
        from .report.figure_plan import draw_figures  # matplotlib, when figures are asked for

        return draw_figures(
            SweepFolder(
                self.folder,
                self.results,
                self.manifest,
                self.param_errors,
                self.profile,
                self.modules,
                self.part_errors,
                self.timing,
            )
        )

    @cached_property
    def answers(self) -> dict[str, dict[str, Any]]:
        """The report's answer as data, by dtype label, computed from `results` as the report's.

        Each answer holds `train`, the recommended setup (`library`, `scaling`, `mode`, `loss_in`, `method`,
        `n_timesteps`), its `label` and the numbers behind it, `reason` in words, and `code`, the lines to write
        (empty for "do not").

        Example:
            ```python
            answer = result.answers["float16"]
            print(answer["train"], answer["library"], answer["scaling"])
            print(answer["code"])
            ```
        """
        return answer_records(
            self.results,
            self.manifest.get("device"),
            self.manifest.get("problem"),
            self.manifest.get("device_details"),
            self.manifest,
            self.timing,
        )

    @cached_property
    def verdicts(self) -> list[dict[str, Any]]:
        """The report's verdicts as data, one record per dtype × library × mode × loss placement.

        Each record holds the label, the setup that earned it and its numbers (`worst_grad_params_rel_err`,
        `roundoff_to_noise`, `roundoff_to_disc`, `failures`, ...).

        Example:
            ```python
            [(v["dtype"], v["library"], v["label"]) for v in result.verdicts]
            ```
        """
        return verdict_records(self.results)

    def write_report(self, out: str | Path | None = None) -> Path:
        """Write the report and its figures (under the folder's `figures/`), as `roundoff report` does.

        Args:
            out: Where the report goes; default `report.md` in the folder.

        Returns:
            The report's path.

        Example:
            ```python
            ra.load("results/otflow-fp16").write_report()
            ```
        """
        return write_report(self.folder, out)


@dataclass(frozen=True)
class PlannedSweep:
    """A validated sweep and the folder it writes to: what the command line prints before running it."""

    plan: SweepPlan
    out: Path
    started: float = field(default_factory=time.perf_counter)  # when planning began: the sweep's time counts from here


@inert_breakpoints()  # the plan evaluates the model once: a breakpoint() there must not stop a script either
def plan_sweep(
    model: str | Callable[..., Any] | None = None,
    *,
    config: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
    source: str = "",
    **settings: Any,
) -> PlannedSweep:
    """Validate a sweep without running it. `settings` are the keys of a config file (`timesteps`, `dtype`,
    `options`, `scaler`, `workers`, `threads`, ...); they override `config`'s. Everything wrong with the request,
    the output folder included, raises InputError here, before anything is written; `source` is what its message
    calls the settings (the command line passes "command line"; from Python the key alone says which). `model` may be
    the factory function itself: it is recorded and loaded by its module and name, as `package.module:factory` is."""
    started = time.perf_counter()
    if callable(model):
        model = function_spec("model", model, MODEL_FORMS)
    overrides = {
        key: _as_list(value) if key in _LIST_KEYS else value for key, value in {"model": model, **settings}.items()
    }
    plan = engine.plan(resolve(config, overrides, source))
    if plan.model.name.startswith("__main__:") and plan.config.executor_name != "local":
        # Worker processes and cluster jobs start from the package, not from this notebook or script.
        raise InputError(
            f"model {plan.model.name} is defined in __main__ (this notebook or script), which the "
            f"{plan.config.executor_name} executor's workers cannot import; define the factory in a module, "
            "or run with executor='local'"
        )
    folder = out_folder(out) or engine.default_out_dir(plan)
    ResultStore(folder).check(fingerprint(plan), force=force)
    return PlannedSweep(plan, folder, started)


def run_sweep(
    planned: PlannedSweep,
    *,
    force: bool = False,
    report: bool = True,
    progress: Progress | None = None,
    stop_requested: Callable[[], bool] | None = None,
) -> SweepResult:
    """Run what the folder does not hold yet; write the report unless `report` is False. Raises
    sweep.SweepInterrupted / SweepIncomplete when configurations are left without a result."""
    with inert_breakpoints():  # a breakpoint() left in the user's model must not hold a batch sweep at a pdb prompt
        outcome = engine.run(planned.plan, planned.out, progress=progress, force=force, stop_requested=stop_requested)
        _time_the_answer(planned, outcome, progress, stop_requested)
    if report:
        write_report(planned.out)
    loaded = load(planned.out)
    return replace(loaded, run=outcome)


def _time_the_answer(
    planned: PlannedSweep,
    outcome: engine.SweepOutcome,
    progress: Progress | None,
    stop_requested: Callable[[], bool] | None,
) -> None:
    """Time the setups the answer compares again, interleaved (execution/timing_pass.py), into timing.parquet: after a
    sweep that ran configurations, or one whose folder has no timing yet. Not where the sweep ran elsewhere (Slurm):
    this machine's times would say nothing of the sweep's device; nor with `timing=False` (`--no-timing`)."""
    plan = planned.plan
    kept = outcome.n_run == 0 and (planned.out / TIMING).is_file()
    if not plan.config.timing or not plan.executor.runs_here or kept:
        return
    rows, _ = judged_rows(read_sweep_folder(planned.out))
    configs = [Configuration(**config) for config in setups_to_time(rows.results)]
    sweep_seconds = time.perf_counter() - planned.started
    if configs and progress is not None:
        progress.note(
            f"timing the answer's setups again, interleaved, within {TIME_SHARE:.0%} of the sweep's "
            f"{sweep_seconds:.0f} s"
        )
    timed = time_setups(plan, configs, sweep_seconds, stop_requested or (lambda: False))
    ResultStore(planned.out).write_timing(timed.rows, timed.seconds, sweep_seconds)


def sweep(
    model: str | Callable[..., Any] | None = None,
    *,
    config: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
    report: bool = True,
    progress: Progress | bool | None = True,
    **settings: Any,
) -> SweepResult:
    """Run a sweep, as `roundoff sweep` does, and return its tables.

    Args:
        model: A built-in model's name, `package.module:factory`, `path/to/file.py:factory`, or the factory function
            itself (recorded and loaded again by its module and name).
        config: A TOML config file; `model` and `settings` override its keys.
        out: The results folder; default a new folder under `results/`. An existing folder of the same sweep is
            resumed.
        force: Replace a folder that holds another sweep's results.
        report: Write `report.md` and its figures when the sweep ends.
        progress: True shows the command line's progress bar, in a terminal or a notebook; False or None shows
            nothing; or an object following `roundoff_analyzer.Progress`.
        **settings: The keys of a config file (`timesteps`, `dtype`, `scaling`, `options`, `workers`, ...); a single
            value stands for a list of one.

    Returns:
        The finished sweep's tables, with `run` saying how the run went.

    Raises:
        InputError: Bad input, in one line saying what is allowed, before anything is written.
        SweepInterrupted: The sweep was stopped; what finished is on disk and a second call resumes it.
        SweepIncomplete: Configurations were left without a result (a worker died); the rest is on disk.

    Example:
        ```python
        import roundoff_analyzer as ra
        result = ra.sweep(model="otflow", timesteps=[8, 32], dtype="float16", scaling=["none", "grad"])
        result.answers["float16"]["train"]
        ```
    """
    planned = plan_sweep(model, config=config, out=out, force=force, **settings)
    for line in planned.plan.warnings():
        warnings.warn(line.removeprefix("warning: "), stacklevel=2)
    if progress is True:
        from rich.console import Console

        from .execution.progress_bar import RichProgress

        with RichProgress(Console(emoji=False)) as bar:
            return run_sweep(planned, force=force, report=report, progress=bar)
    return run_sweep(planned, force=force, report=report, progress=progress or None)


def load(folder: str | Path) -> SweepResult:
    """Open a finished sweep folder (what `roundoff sweep --out` wrote), reading its Parquet tables and manifest only.

    Args:
        folder: The results folder.

    Returns:
        The sweep's tables; `run` is None.

    Raises:
        InputError: The folder does not exist or does not hold a sweep's results.

    Example:
        ```python
        result = ra.load("results/otflow-20260101-120000")
        result.results[["dtype", "scaling", "grad_params_rel_err"]]
        ```
    """
    read = read_sweep_folder(folder)
    return SweepResult(
        read.path,
        read.results,
        read.manifest,
        read.param_errors,
        read.profile,
        read.modules,
        read.part_errors,
        read.timing,
    )


def model(
    name: str, *, data: str | None = None, checkpoint: str | Path | None = None, device: str = "cpu", **options: Any
) -> ModelProblem:
    """The problem a sweep of this model measures, built as the sweep builds it: the same weights (from the seed, or
    a checkpoint's), the same fixed batch, the same loss; the answer's code starts from it.

    Args:
        name: A built-in model's name (`roundoff list`), `package.module:factory` or `path/to/file.py:factory`.
        data: The data, as `--data` (default: the model's own).
        checkpoint: A checkpoint file whose weights replace the initial ones, as `--checkpoint`.
        device: Where the model and its batches are built: `cpu`, `cuda`, `cuda:N` or `auto`.
        **options: The model's options, as `-o key=value` (`seed` among them).

    Returns:
        A built-in model's `TrajectoryProblem`: `func`, the vector field whose parameters are measured; `loss`, the
            loss of a trajectory; `y0`, the sweep's fixed batch; `batches(count)`, batches 1, 2, … of its data.
            A factory's `Problem` (`model`, `step`, `sample_batch`, `batches(count)`) where it returns one.

    Raises:
        InputError: An unknown model, option, data source, device or a checkpoint that does not fit, in one line.

    Example:
        ```python
        problem = ra.model("otflow", hidden=32)
        func, loss_fn, batches = problem.func, problem.loss, problem.batches(16)
        ```
    """
    from .axes.data import parse_data
    from .axes.models import load_checkpoint, parse_options, resolve_model
    from .core.devices import resolve_device
    from .planning.sweep_plan import build_problem

    spec = resolve_model(name)
    problem = build_problem(
        spec, parse_options(spec, options), resolve_device(device), parse_data(data) if data is not None else None
    )
    if checkpoint is not None:
        load_checkpoint(problem.model, Path(checkpoint), spec.name)
    return problem


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, (str, int)) else value
