"""Roundoff beside what it competes with: the discretisation error per grid, and the gradient noise."""

from __future__ import annotations

import pandas as pd

from ...axes.models.problem import recorded_as_step
from ...judging import verdict
from ...measuring.draws import grows_with_steps
from ...measuring.outcomes import Status
from .. import formatting, seed_words
from ..findings import GRID_COLUMNS
from ..section_inputs import SectionInputs

# (header, roundoff column, discretisation column) of the quantities set side by side.
QUANTITIES = (
    ("solution", "sol_rel_err", "disc_sol_rel_err"),
    ("param. gradient", "grad_params_rel_err", "disc_grad_params_rel_err"),
)
# The orders the fine reference's densities converged at, by the quantity the report names.
ORDER_COLUMNS = {"final state": "fine_ref_final_order", "parameter gradient": "fine_ref_grad_params_order"}
# An observed order below this is RK4's order lost, not a pre-asymptotic wobble around 4.
SMOOTH_ORDER = 3.5
# Up to this many dtypes get their own roundoff columns; beyond, one pair of columns spans them all.
FEW_DTYPE_COLUMNS = 4


def section(inputs: SectionInputs) -> list[str]:
    return discretisation_and_noise(inputs.results, inputs.sweep.manifest.get("problem"))


def discretisation_and_noise(results: pd.DataFrame, problem: dict | None = None) -> list[str]:
    """`problem`: the manifest's record of the model's form: a training step's output times may fall between grid
    steps (a trajectory problem's are its grid's), and it says where the batch size was read."""
    step = recorded_as_step(problem)
    ok = results[results["status"] == Status.OK]
    noise = results["grad_noise_rel"].dropna() if "grad_noise_rel" in results else pd.Series(dtype=float)
    heading = ["## Roundoff against discretisation error and gradient noise", ""]
    if not has_fine_reference(results):
        if noise.empty and not grows_with_steps((problem or {}).get("draws")):
            return []
        return [*heading, no_fine_reference(problem), "", *_noise_lines(results, ok, noise, problem)]
    dtypes = list(ok["dtype"].unique())
    dtypes = dtypes if len(dtypes) <= FEW_DTYPE_COLUMNS else []  # many: one pair of columns over them all
    fine = results.dropna(subset=["fine_ref_steps"]).iloc[0]
    t0, t1 = formatting.span(results)
    lines = [
        *heading,
        "The discretisation error is each library's float64 run on that grid against a fine reference: the same "
        f"problem solved once in float64 by the classical RK4 with {int(fine['fine_ref_steps'])} steps on "
        f"[{t0}, {t1}], "
        f"through every grid point of the sweep. {_own_error(fine, step)} A discretisation error below "
        f"{verdict.RESOLVED:g} times that is marked ≈ (not resolved): neither the verdict nor the answer compares the "
        "roundoff with it. The roundoff columns give, per dtype, the min – max over the scalings of the runs without "
        "failure.",
        "",
        _grid_table(results, ok, dtypes),
        "",
    ]
    return lines + _noise_lines(results, ok, noise, problem)


def has_fine_reference(results: pd.DataFrame) -> bool:
    """Whether any run of `results` was set against a fine reference (the discretisation error is known)."""
    return "fine_ref_steps" in results and not results["fine_ref_steps"].isna().all()


def no_fine_reference(problem: dict | None) -> str:
    """Why the discretisation error is not given, as far as the folder says: the step's draws (the manifest's record),
    else a fine reference that was not solved."""
    if grows_with_steps((problem or {}).get("draws")):
        return (
            "**No discretisation error is given**: the step draws more random numbers on a finer grid (its vector "
            "field draws at each evaluation), so its solve on a finer grid is another random ODE and no fine reference "
            "solves the same problem: neither the verdict nor the answer compares the roundoff with a discretisation "
            "error."
        )
    return (
        "**No discretisation error is given**: the fine reference was not solved (too large for the memory, or it "
        "failed): neither the verdict nor the answer compares the roundoff with a discretisation error."
    )


def _noise_lines(results: pd.DataFrame, ok: pd.DataFrame, noise: pd.Series, problem: dict | None) -> list[str]:
    if noise.empty:
        return [
            "The gradient noise was not measured (`--noise-batches 0`, or a model without a batch sampler), so the "
            "gradient roundoff has no training yardstick here."
        ]
    batches = int(results["grad_noise_batches"].dropna().iloc[0])
    per_dtype = (
        "; ".join(
            f"{d}: parameter-gradient roundoff "
            f"{formatting.value_range(runs['grad_params_rel_err'], formatting.error)}, "
            f"{formatting.value_range(runs['roundoff_to_noise'], formatting.in_u)}× the noise"
            for d, runs in ok.groupby("dtype", sort=False)
        )
        if ok["dtype"].nunique() <= formatting.FEW
        else (
            f"over the {ok['dtype'].nunique()} dtypes, parameter-gradient roundoff "
            f"{formatting.value_range(ok['grad_params_rel_err'], formatting.error)}, "
            f"{formatting.value_range(ok['roundoff_to_noise'], formatting.in_u)}× the noise (per format in the "
            "answer's table)"
        )
    )
    size, uncertainty = verdict.noise_batch_size(results), verdict.noise_uncertainty(results)
    against = (
        f"{seed_words.over_initialisations(results, ', ')}, each against its own initialisation's noise"
        if seed_words.several(results)
        else ""
    )
    record = problem or {}
    read = record.get("batch_size_from") if record.get("batch_size") == size else None
    unknown = f", at a batch size not known ({read})" if read and size is None else ""
    return [
        f"**Gradient noise** {seed_words.noise_value(results, noise)}{f' at batch {size}' if size else unknown}"
        + (f" ({read})" if read and size else "")
        + ": the relative spread of "
        f"the float64 parameter gradient over {batches} other batches of the model's data"
        + (f" of {size} points each" if size else "")
        + (f", known to {formatting.plus_minus(uncertainty)}" if uncertainty is not None else "")
        + f". Against it, over the runs without failure{against}: {per_dtype}."
    ]


def narrow_reference(manifest: dict) -> str | None:
    """The report's line where the float64 evaluation of the model met narrower values of its own code (the contract
    check's record in the manifest): the reference is less precise than float64 there."""
    problem = manifest.get("problem") or {}
    found = problem.get("narrow_in_float64") or []
    if not found:
        unwatched = problem.get("narrow_unwatched")
        return f"**The float64 reference was not checked for float32 values**: {unwatched}." if unwatched else None
    return (
        "**The float64 reference computes with float32 values of the model's own code**, so it is less precise than "
        f"float64 there and an error near float32's unit roundoff against it is not resolved: "
        f"{formatting.bounded_listing(found)} (`manifest.json`, `problem.narrow_in_float64`)."
    )


def _grid_table(results: pd.DataFrame, ok: pd.DataFrame, dtypes: list[str]) -> str:
    keys = seed_words.grid_columns(results, GRID_COLUMNS)
    grids = results.dropna(subset=["disc_sol_rel_err"]).drop_duplicates(keys)
    order = {lib: i for i, lib in enumerate(results["library"].unique())}
    methods = {m: i for i, m in enumerate(results["method"].unique())}
    grids = grids.sort_values(
        keys,
        key=lambda c: c.map(order) if c.name == "library" else (c.map(methods) if c.name == "method" else c),
    )
    rows = []
    for _, grid in grids.iterrows():
        runs = ok[(ok[keys] == grid[keys]).all(axis=1)]
        cells = [str(grid[k]) for k in keys]
        cells += [_disc(grid, disc) for _, _, disc in QUANTITIES]
        columns: list[str | None] = [*dtypes] if dtypes else [None]  # None: one pair of columns over them all
        for dtype in columns:
            at = runs[runs["dtype"] == dtype] if dtype is not None else runs
            cells += [formatting.value_range(at[roundoff], formatting.error) for _, roundoff, _ in QUANTITIES]
        rows.append(cells)
    headers = keys + [f"discretisation: {h}" for h, _, _ in QUANTITIES]
    every = f"roundoff over the {ok['dtype'].nunique()} dtypes"
    headers += [f"{d} roundoff: {h}" for d in dtypes for h, _, _ in QUANTITIES] or [
        f"{every}: {h}" for h, _, _ in QUANTITIES
    ]
    return formatting.bounded_table(rows, headers)


def _interpolated(fine: pd.Series, step: bool) -> int | None:
    """How many output times the fine reference read between its grid points (None: not known, a step's folder from
    before they were counted); a trajectory problem's output times are its grid's."""
    value = fine.get("fine_ref_interpolated_times")
    return int(value) if formatting.present(value) else (None if step else 0)


def _slower_cause(fine: pd.Series, step: bool) -> str:
    """Why the fine reference converges below RK4's order, as far as the data show it: linear interpolation where
    output times fell between its grid steps (second order however smooth the right-hand side), else a right-hand
    side that is not smooth; nothing where the folder does not say which."""
    interpolated = _interpolated(fine, step)
    if interpolated is None:
        return ""
    if interpolated:
        return (
            f"; {formatting.plural(interpolated, 'output time')} of the step fell between grid steps and "
            f"{'was' if interpolated == 1 else 'were'} read off by linear interpolation, second order however smooth "
            "the right-hand side, which costs it that"
        )
    return "; a kink in the right-hand side costs it that"


def _own_error(fine: pd.Series, step: bool = False) -> str:
    """How the fine reference knows its own error: the orders its three densities converged at, and the error that
    puts on it (a folder from before the orders were recorded: the error alone)."""
    errors = (
        f"{formatting.error(fine['fine_ref_final_rel_err'])} in the final state and "
        + formatting.error(fine["fine_ref_grad_params_rel_err"])
        + " in the parameter gradient"
    )
    if not any(formatting.present(fine.get(c)) for c in ORDER_COLUMNS.values()):
        return f"Its own estimated error is {errors}."
    agreeing = "none (they agree to float64 roundoff)"
    orders = formatting.listing(
        f"{formatting.in_u(fine[column]) if formatting.present(fine.get(column)) else agreeing} in the {quantity}"
        for quantity, column in ORDER_COLUMNS.items()
    )
    unknown = not formatting.present(fine["fine_ref_final_rel_err"]) or not formatting.present(
        fine["fine_ref_grad_params_rel_err"]
    )
    slower = any(formatting.present(fine.get(c)) and fine[c] < SMOOTH_ORDER for c in ORDER_COLUMNS.values())
    return (
        f"Solved again with a half and a quarter of the steps, the three converge at order {orders} (RK4's is 4"
        + (_slower_cause(fine, step) if slower else "")
        + "), and the differences' sizes and directions put its own error at "
        f"{errors}" + (" (— where they do not shrink: unknown, and nothing resolved against it)." if unknown else ".")
    )


def _disc(grid: pd.Series, column: str) -> str:
    fine = grid["fine_ref_final_rel_err"] if column == "disc_sol_rel_err" else grid["fine_ref_grad_params_rel_err"]
    value = grid[column]
    if formatting.present(value) and not (formatting.present(fine) and value >= verdict.RESOLVED * fine):
        return f"≈ {formatting.error(value)}"
    return formatting.error(value)
