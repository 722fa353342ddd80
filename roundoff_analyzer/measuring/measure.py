"""One configuration, measured: its axes looked up, skipped or failed early where it cannot run, else its repeats
run against the float64 reference and their outcome turned into rows (`rows.py`)."""

from __future__ import annotations

from dataclasses import replace

from ..axes.arithmetics import ARITHMETICS
from ..axes.grid import Configuration
from ..axes.keep_float32 import keep_skip_reason, kept_in_float32
from ..axes.methods import AdaptiveRK, tableau_of
from ..axes.scalings import SCALINGS
from ..core.errors import InputError
from ..core.user_code import quit_line
from . import failures
from .columns import ERROR_METRICS, VECTOR_FIELD, WHOLE_MODEL
from .cpu_memory import cpu_peak_memory
from .draws import draws_anew
from .kept_share import kept_share
from .memory import configuration_oom
from .module_hooks import ModuleObserver, unwatched
from .one_run import RunOutcome, runs_sharing_forward
from .outcomes import FailureClass, Status
from .rows import (
    Measurement,
    Row,
    base_row,
    failure_columns,
    parameter_error_rows,
    parameter_names,
    part_error_rows,
    profile_rows,
    run_columns,
    step_columns,
)
from .run_inputs import ResolvedRun, SweepShared
from .run_spec import RunSpec
from .scale_hint import hint_key, needs_hint, shared_scale_hint
from .time_limit import time_limit
from .torch_state import restored_torch_state
from .yardsticks import yardstick_columns

# A configuration's float64 references by the draw of the step's random numbers they were given.
References = dict[int, RunOutcome]


def measure_configurations(configs: list[Configuration], shared: SweepShared) -> list[Measurement]:
    """The measurements of configurations that differ in their scaling only (a family of `forward_families`), in
    their order: each run's forward is shared by their scalings where they can share it."""
    measured: dict[int, Measurement] = {}
    ready: list[tuple[int, ResolvedRun, Row, References]] = []
    for index, config in enumerate(configs):
        checked = _checked(config, shared)
        if isinstance(checked, Measurement):
            measured[index] = checked
        else:
            ready.append((index, *checked))
    if ready:
        (keep,) = {configs[index].keep_float32 for index, *_ in ready}
        # Autocast modes run the problem's own float32 vector field: the kept modules' forwards are swapped for these
        # runs. A step's model is not what the solver calls: its kept weights are kept wherever the step uses them.
        whole_step = shared.copies.trajectory is None
        with kept_in_float32(shared.copies.model, keep, cover_forward=not whole_step):
            runs = _timed_runs([resolved for _, resolved, _, _ in ready], shared)
            for (index, resolved, row, references), outcomes in zip(ready, runs, strict=True):
                paired = [references[resolved.draw(repeat)] for repeat in range(len(outcomes))]
                measured[index] = _measurement(resolved, shared, row, paired, outcomes)
    return [measured[index] for index in range(len(configs))]


def forward_families(configs: list[Configuration], timeout_s: float | None) -> list[list[Configuration]]:
    """`configs` in families that `measure_configurations` measures together, in order of their first member: those
    that differ in their scaling only, where every scaling and the arithmetic can share a forward and no time limit
    applies (a limit is each configuration's own); every other configuration alone."""
    families: dict[object, list[Configuration]] = {}
    for config in configs:
        shares = (
            timeout_s is None
            and SCALINGS.get(config.scaling).shares_forward
            and getattr(ARITHMETICS.get(config.arithmetic), "shares_forward", False)
        )
        families.setdefault(replace(config, scaling="") if shares else config, []).append(config)
    return list(families.values())


def _checked(config: Configuration, shared: SweepShared) -> Measurement | tuple[ResolvedRun, Row, References]:
    """The configuration's measurement where it ends before any run (skipped, unsupported, too large, no reference);
    else its setup, its row so far and its float64 references, by draw."""
    resolved = ResolvedRun.of(config, shared.step_control)
    library, method, dtype = resolved.library, resolved.method, resolved.dtype
    row = base_row(config, dtype, shared)

    skip = (
        resolved.scaling.skip_reason(library)
        or library.unsupported_method_reason(method)
        or resolved.arithmetic.skip_reason(dtype, config.rounding)
        or keep_skip_reason(config.keep_float32, config.mode, config.arithmetic, dtype)
    )
    if skip:
        return Measurement({**row, "status": Status.SKIPPED, "skip_reason": skip}, [], [])
    row = {**row, "tableau": tableau_of(library, method)}
    reason = resolved.arithmetic.unsupported_reason(dtype, shared.device)
    if reason:
        return Measurement({**row, **failure_columns(failures.unsupported(reason))}, [], [])

    too_large = configuration_oom(config.n_timesteps, shared.shape.state_values, shared.device)
    if too_large:
        return Measurement({**row, **failure_columns(too_large)}, [], [])
    try:
        # Each repeat's draw of the step's random numbers has its reference (one, where the step draws none).
        references = {
            draw: shared.references.get(library, method, config.n_timesteps, draw)
            for draw in dict.fromkeys(resolved.draw(repeat) for repeat in range(shared.repeats))
        }
    except SystemExit as exc:
        raise InputError(quit_line(f"{library.name} {method.name}: the reference solve", exc)) from None
    except InputError:  # user code that quit (above, or in the reference's own run): the sweep stops
        raise
    except failures.ReferenceFailed as exc:
        # Nothing to compare the run with: not a failure of the low dtype, so the verdict does not judge it.
        return Measurement({**row, "status": Status.SKIPPED, "skip_reason": reference_skip_reason(exc.failure)}, [], [])
    except Exception as exc:  # noqa: BLE001 - a broken reference fails its configurations, not the sweep
        return Measurement({**row, **failure_columns(failures.classify_exception(exc))}, [], [])
    return resolved, row, references


def reference_skip_reason(failure: failures.Failure) -> str:
    return (
        f"the float64 reference failed ({failure.failure_class}: {failure.message}), so there is nothing to compare "
        "the run with"
    )


def _timed_runs(resolved_runs: list[ResolvedRun], shared: SweepShared) -> list[list[RunOutcome]]:
    """Each setup's timed runs (its repeats, up to the first that fails); setups of one family share each repeat's
    forward."""
    for resolved in resolved_runs:
        if needs_hint(resolved, shared):
            shared.scale_hints[hint_key(resolved.config)] = shared_scale_hint(resolved, shared)
    if len(resolved_runs) == 1:
        return [_runs_alone(resolved_runs[0], shared)]
    return _runs_sharing_forward(resolved_runs, shared)


def _runs_alone(resolved: ResolvedRun, shared: SweepShared) -> list[RunOutcome]:
    key, dtype = hint_key(resolved.config), resolved.dtype
    outcomes: list[RunOutcome] = []
    for repeat in range(shared.repeats):
        # The try holds the whole limit: an alarm between arming and the run, or as it is disarmed, is a timeout too.
        try:
            with restored_torch_state(), time_limit(shared.timeout_s):
                prepared = resolved.prepare(shared, repeat)
                hint = shared.scale_hints.get(key)
                outcome = resolved.run(prepared, shared, resolved.config.n_timesteps, hint, draw=resolved.draw(repeat))
                if outcome.retries is not None:
                    shared.scale_hints[key] = outcome.retries
                silent = prepared.silent_overflow() if outcome.failure is None and prepared.silent_overflow else None
                if silent is not None:
                    outcome.failure = failures.saturated(*silent, dtype.max)
        except failures.ConfigurationTimeout as exc:
            outcome = RunOutcome(failure=failures.classify_exception(exc))
        outcomes.append(outcome)
        if outcome.failure is not None:
            break
    return outcomes


def _runs_sharing_forward(resolved_runs: list[ResolvedRun], shared: SweepShared) -> list[list[RunOutcome]]:
    """The repeats of a family's setups, one forward per repeat; the scalings that search a scale take their passes
    first (they keep the graph for their own search anyway)."""
    order = sorted(range(len(resolved_runs)), key=lambda i: not resolved_runs[i].scaling.searches_scale)
    first = resolved_runs[0]
    outcomes: list[list[RunOutcome]] = [[] for _ in resolved_runs]
    for repeat in range(shared.repeats):
        running = [i for i in order if not (outcomes[i] and outcomes[i][-1].failure is not None)]
        if not running:
            break
        with restored_torch_state():
            prepared = first.prepare(shared, repeat)
            backwards = [
                (resolved_runs[i].scaling, shared.scale_hints.get(hint_key(resolved_runs[i].config))) for i in running
            ]
            run = RunSpec(
                prepared,
                shared.copies,
                first.library,
                first.method,
                first.config.n_timesteps,
                loss_in=first.loss_in,
                draw=first.draw(repeat),
            )
            runs = runs_sharing_forward(run, backwards, shared.settings)
        for i, outcome in zip(running, runs, strict=True):
            if outcome.retries is not None:
                shared.scale_hints[hint_key(resolved_runs[i].config)] = outcome.retries
            outcomes[i].append(outcome)
    return outcomes


def _measurement(
    resolved: ResolvedRun, shared: SweepShared, row: Row, references: list[RunOutcome], outcomes: list[RunOutcome]
) -> Measurement:
    """The configuration's Measurement from its timed runs, each with the reference of its draw: `row` completed (and
    its untimed memory and per-module runs, where asked for)."""
    config, method, dtype = resolved.config, resolved.method, resolved.dtype
    n_timesteps = config.n_timesteps
    last, reference = outcomes[-1], references[len(outcomes) - 1]
    if shared.cpu_memory and shared.device.type == "cpu" and last.failure is None:
        # The profiler slows every op, so the peak comes from a run of its own, not from the timed ones.
        with cpu_peak_memory() as peak:
            # The same name as the timed runs' copy: that copy is freed inside the block, and the peak counts the free.
            prepared = resolved.prepare(shared)
            resolved.run(prepared, shared, n_timesteps, last.retries, draw=resolved.draw(len(outcomes) - 1))
        last.peak_memory_bytes = peak.bytes
    if (
        last.failure is not None
        and last.failure.failure_class == FailureClass.STEP_SIZE_UNDERFLOW
        and isinstance(method, AdaptiveRK)
    ):
        last.failure = failures.step_size_underflow(last.failure, method.rtol, dtype.name, dtype.unit_roundoff)

    names = parameter_names(shared.copies)
    measured = run_columns(config, dtype, outcomes, references, names)
    modules = _module_rows(resolved, shared, last, resolved.draw(len(outcomes) - 1)) if shared.per_module else []
    # What share of the field's work the kept part does: a setup that keeps all of it is not a low-precision setup.
    kept = (
        kept_share(resolved.prepare(shared), shared.copies, dtype.torch_dtype) if config.keep_float32 != "none" else {}
    )
    beside: Row = {}
    if shared.yardsticks is not None:
        errors = {name: measured[name] for name in ERROR_METRICS}
        yardsticks = shared.yardsticks
        # The fine reference is solved on draw 0: the discretisation error is that of the reference of draw 0.
        first = outcomes[0] if draws_anew(shared.copies) else last
        fine, noise = yardsticks.fine(), yardsticks.noise()
        beside = yardstick_columns(first, references[0], fine, noise, config.n_timesteps, errors)
    return Measurement(
        {**row, **step_columns(method, last, reference), **measured, **beside, **kept},
        parameter_error_rows(names, last, reference, dtype),
        profile_rows(last.report, reference.report),
        modules,
        part_error_rows(names, last, reference, dtype),
    )


def _module_rows(resolved: ResolvedRun, shared: SweepShared, measured: RunOutcome, draw: int) -> list[Row]:
    """Every module watched over one more run, untimed (the hooks and the float64 re-runs slow it down), on the draw of
    the step's random numbers the measured run had (`draw`), each call's re-runs on the numbers it drew."""
    observer = None
    n_timesteps = resolved.config.n_timesteps
    try:
        with restored_torch_state(), time_limit(shared.timeout_s):
            prepared = resolved.prepare(shared)
            root = VECTOR_FIELD if shared.copies.trajectory is not None else WHOLE_MODEL
            try:
                observer = ModuleObserver(
                    prepared.model, resolved.dtype.max, resolved.dtype.smallest_normal, prepared.context, root
                )
            except Exception as exc:  # noqa: BLE001 - a model the observer cannot copy: one row says so, the sweep goes on
                return [{"module": root, "phase": "forward", "n_calls": 0, "measurement": unwatched(exc)}]
            with observer.attached():
                watched = resolved.run(prepared, shared, n_timesteps, measured.retries, observer=observer, draw=draw)
        if watched.failure is not None and measured.failure is None:
            observer.stopped(f"the watched run failed where the measured one did not: {watched.failure.message}")
    except failures.ConfigurationTimeout:
        if observer is not None:  # what was seen until the limit still says where the values went
            observer.stopped("the watched run stopped at the time limit")
    return observer.rows() if observer is not None else []
