"""The report's "Where the roundoff comes from" section, from `modules.parquet` (a sweep run with --per-module): for
the worst run of each dtype, where an overflow began and the modules ranked by the roundoff they add (over the calls
whose values reach the dtype's normal range; calls on subnormal values only are ranked apart, in a sentence) and by
how close they come to the dtype's range; then what keeping modules in float32 did. Its size is bounded whatever the
grid: one run and at most MODULE_ROWS modules per dtype, at most KEPT_LINES lines on keep_float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...axes.dtypes import DTYPES
from ...axes.grid import CONFIG_COLUMNS
from ...axes.models.problem import recorded_as_step
from ...measuring.columns import COMPLETE, VECTOR_FIELD
from ...measuring.outcomes import Status
from .. import formatting, seed_words
from ..section_inputs import SectionInputs

MODULE_ROWS = 5  # per dtype: the modules that add the most roundoff, then those closest to the range's limits
KEPT_LINES = 4
SECTION = "## Where the roundoff comes from"
HEADERS = (
    "module",
    "phase",
    "local roundoff / u",
    "largest magnitude / dtype max",
    "share below smallest normal",
    "first non-finite step",
)


@dataclass(frozen=True)
class Origin:
    """Where a non-finite value began in one run."""

    module: str
    phase: str
    step: int
    produced: bool  # its own computation made it from finite values (else it only reached the module)


def _keys(table: pd.DataFrame) -> list[str]:
    return [c for c in CONFIG_COLUMNS if c in table]


def worst_runs(results: pd.DataFrame, modules: pd.DataFrame) -> dict[str, pd.Series]:
    """Per dtype, the worst run keeping nothing in float32 that has module rows: the first failed one in grid order,
    else the largest parameter-gradient error in units of u."""
    measured = results.merge(modules[_keys(modules)].drop_duplicates(), on=_keys(modules))
    if "keep_float32" in measured:
        measured = measured[measured["keep_float32"] == "none"]
    measured = measured[measured["status"] != Status.SKIPPED]
    worst = {}
    for dtype, runs in measured.groupby("dtype", sort=False):
        failed = runs[runs["status"] == Status.FAILED]
        if not failed.empty:
            worst[str(dtype)] = failed.iloc[0]
        elif runs["grad_params_rel_err_over_u"].notna().any():
            worst[str(dtype)] = runs.loc[runs["grad_params_rel_err_over_u"].idxmax()]
    return worst


def rows_of(modules: pd.DataFrame, run: pd.Series) -> pd.DataFrame:
    keys = _keys(modules)
    mask = pd.Series(True, index=modules.index)
    for key in keys:
        mask &= modules[key] == run[key]
    return modules[mask]


def unused(rows: pd.DataFrame) -> list[str]:
    """The modules of a run whose every forward call's output no gradient reached, in a backward that ran to its end:
    the loss does not depend on them, so they are never where its roundoff or its overflow comes from."""
    if "n_calls_unused" not in rows:
        return []
    forward = rows[(rows["phase"] == "forward") & rows["n_calls_unused"].notna()]
    return [str(m) for m in forward.loc[forward["n_calls_unused"] >= forward["n_calls"], "module"]]


def _used(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[~rows["module"].isin(unused(rows))]


def origin(rows: pd.DataFrame) -> Origin | None:
    """Where the first non-finite value of a run began: forward before backward, the earliest step; among the modules
    whose own computation made it, a leaf module before the vector field as a whole (which holds it). Never a module
    the loss does not depend on."""
    rows = _used(rows)
    hit = rows[rows["first_nonfinite_step"].notna()]
    if hit.empty:
        return None
    produced = (
        hit["produced_nonfinite"].fillna(False).astype(bool)
        if "produced_nonfinite" in hit
        else pd.Series(False, index=hit.index)
    )
    ordered = hit.assign(
        _phase=(hit["phase"] == "backward").astype(int),
        _produced=(~produced).astype(int),
        _whole=(hit["module"] == VECTOR_FIELD).astype(int),
        _call=hit.get("first_nonfinite_call", 0),
    ).sort_values(["_phase", "first_nonfinite_step", "_produced", "_whole", "_call"])
    first = ordered.iloc[0]
    return Origin(
        str(first["module"]), str(first["phase"]), int(first["first_nonfinite_step"]), bool(first["_produced"] == 0)
    )


def ranked_error(rows: pd.DataFrame) -> str:
    """The column the modules are ranked by: the local roundoff over the calls whose values reach the dtype's normal
    range (a folder from before it was measured: over every call)."""
    return NORMAL_RANGE if NORMAL_RANGE in rows else "local_rel_err"


NORMAL_RANGE = "local_rel_err_normal_range"


def ranked(rows: pd.DataFrame, unit_roundoff: float, limit: int = MODULE_ROWS) -> pd.DataFrame:
    """The modules that add the most roundoff (largest local roundoff over the calls in the normal range), then those
    nearest the range's limits (the largest magnitude against the dtype's max, the largest share below its smallest
    normal), at most `limit` rows."""
    leaves = _used(rows[(rows["module"] != VECTOR_FIELD) & (rows["n_calls"] > 0)])
    error = ranked_error(leaves)
    by_error = leaves[leaves[error].notna()].sort_values(error, ascending=False).head(max(limit - 2, 1))
    rest = leaves.drop(by_error.index)
    by_range = rest.sort_values("max_abs_over_dtype_max", ascending=False).head(1)
    by_underflow = rest.drop(by_range.index)
    by_underflow = (
        by_underflow[by_underflow["below_normal_share"].fillna(0) > 0]
        .sort_values("below_normal_share", ascending=False)
        .head(1)
    )
    return pd.concat([by_error, by_range, by_underflow]).head(limit)


def below_normal(rows: pd.DataFrame, limit: int = MODULE_ROWS) -> pd.DataFrame:
    """The module rows whose largest local roundoff came from calls on values entirely below the dtype's smallest
    normal (larger than over their other calls, or with no other call), largest first, at most `limit`."""
    if NORMAL_RANGE not in rows or "n_calls_below_normal" not in rows:
        return rows.iloc[:0]
    used = _used(rows[rows["n_calls_below_normal"].fillna(0) > 0])
    apart = used[used["local_rel_err"].notna() & ~(used["local_rel_err"] <= used[NORMAL_RANGE])]
    return apart.sort_values("local_rel_err", ascending=False).head(limit)


def below_normal_sentence(rows: pd.DataFrame, run: pd.Series) -> str | None:
    """The calls ranked apart, said with the run's own parameter-gradient roundoff beside them."""
    apart = below_normal(rows)
    if apart.empty:
        return None
    dtype, unit = str(run["dtype"]), float(run["unit_roundoff"])
    floor = f" ({formatting.error(DTYPES.get(dtype).smallest_normal)})" if dtype in DTYPES else ""

    def said(r) -> str:
        others = (
            f"; {formatting.in_u(r[NORMAL_RANGE] / unit)} u over its other calls"
            if formatting.present(r[NORMAL_RANGE])
            else ""
        )
        return (
            f"`{r['module']}` {r['phase']} {formatting.in_u(r['local_rel_err'] / unit)} u "
            f"({int(r['n_calls_below_normal'])} "
            f"of {int(r['n_calls'])} calls{others})"
        )

    own = run.get("grad_params_rel_err_over_u")
    beside = f" The run's parameter-gradient roundoff is {formatting.in_u(own)} u." if formatting.present(own) else ""
    listed = formatting.listing(said(r) for _, r in apart.iterrows())
    return (
        f"Ranked apart: calls whose every value (the gradient reaching them, backward; their output, forward) lay "
        f"below {dtype}'s smallest normal{floor} compute on subnormals, which hold fewer digits the smaller they are: "
        f"{listed}.{beside}"
    )


def _table(rows: pd.DataFrame, unit_roundoff: float) -> str:
    error = ranked_error(rows)
    cells = [
        [
            f"`{r.module}`",
            r.phase,
            formatting.in_u(getattr(r, error) / unit_roundoff if formatting.present(getattr(r, error)) else None),
            formatting.error(r.max_abs_over_dtype_max),
            formatting.in_u(r.below_normal_share),
            formatting.integer(r.first_nonfinite_step),
        ]
        for r in rows.itertuples()
    ]
    return formatting.markdown_table(cells, HEADERS)


def _run_label(run: pd.Series, status: bool = True, several: bool = False) -> str:
    """`several`: the sweep ran several initialisations, and the label names the run's seed."""
    label = f"{run['library']} {run['method']} n = {int(run['n_timesteps'])} {run['scaling']} {run['mode']}"
    label += seed_words.of_seed(int(run["seed"]) if several else None)
    if not status:
        return label
    return f"{label}, {run['status']}" + (
        f" ({run['failure_class']})"
        if run["status"] == Status.FAILED and formatting.present(run.get("failure_class"))
        else ""
    )


def origin_sentence(found: Origin | None, run: pd.Series | None = None) -> str:
    if found is None:
        # What sums over the calls (a weight's gradient over the steps, on autocast's one low-precision copy) is no
        # module's output: the run's own failure says where it was found.
        if run is not None and run["status"] == Status.FAILED and formatting.present(run.get("failure_message")):
            ending = f"; the run's failure: {run['failure_message']}."
        else:
            ending = "."
        return "No module's output, nor a gradient reaching or leaving a module in one call, was non-finite" + ending
    where = (
        "the vector field's own code, outside its leaf modules,"
        if found.module == VECTOR_FIELD
        else f"`{found.module}`"
    )
    what = {
        ("forward", True): "its output turned non-finite from finite inputs",
        (
            "backward",
            True,
        ): "the gradient it passed on (to its inputs and parameters) turned non-finite from a finite one",
    }.get((found.phase, found.produced), f"a non-finite value reached it ({found.phase})")
    return f"The overflow began in {where} at {found.phase} step {found.step}: {what}."


def overflow_origins(results: pd.DataFrame, modules: pd.DataFrame | None) -> list[str]:
    """Per dtype whose worst run has a module where a non-finite value began, as the section says it: "float16, native
    euler n = 8 none autocast, failed (overflow): The overflow began in `head` at forward step 3: …"."""
    if modules is None or modules.empty:
        return []
    said = []
    for dtype, run in worst_runs(results, modules).items():
        found = origin(rows_of(modules, run))
        if found is not None:
            said.append(
                f"{dtype}, {_run_label(run, several=seed_words.several(results))}: {origin_sentence(found, run)}"
            )
    return said


def incomplete_line(modules: pd.DataFrame) -> str | None:
    """One line where a module's extra run or recomputation failed in some calls: how many rows, and the first."""
    if "measurement" not in modules:
        return None
    said = modules[modules["measurement"].notna() & (modules["measurement"] != COMPLETE)]
    if said.empty:
        return None
    first = said.iloc[0]
    label = _run_label(first, False, seed_words.several(modules))
    return (
        f"Not measured in full: {len(said)} of the {len(modules)} module rows (`modules.parquet`, column "
        f"`measurement`; their local roundoff is over the calls that were measured); the first, `{first['module']}` "
        f"{first['phase']} in {label} {first['dtype']}: {first['measurement']}."
    )


def outside_line(modules: pd.DataFrame) -> str | None:
    """One line naming the modules whose weights the model used outside their call, measured as their calls."""
    if "n_calls_outside" not in modules:
        return None
    forward = modules[(modules["phase"] == "forward") & (modules["n_calls_outside"].fillna(0) > 0)]
    if forward.empty:
        return None
    most = forward.groupby("module", sort=False)[["n_calls_outside", "n_calls"]].max()
    named = formatting.bounded_listing(
        f"`{m}` ({int(r.n_calls_outside)} of {int(r.n_calls)} calls)" for m, r in most.iterrows()
    )
    return (
        "Weights used outside their module's call (a direct `.forward(...)`, an operation on `layer.weight`) are "
        f"counted as calls of the module that owns them: {named}."
    )


def unused_line(modules: pd.DataFrame) -> str | None:
    """One line naming the modules whose output the loss never depends on (in a run whose backward ran to its end)."""
    named = list(dict.fromkeys(unused(modules)))
    if not named:
        return None
    return (
        f"No gradient reached the output of {formatting.bounded_listing(f'`{m}`' for m in named)}: the loss does not "
        "depend "
        "on it, and it is never named as where the roundoff or the overflow comes from."
    )


def kept_lines(results: pd.DataFrame) -> list[str]:
    """Per dtype and keep_float32 value: how many runs failing
    without it ran ok with it, and the error they then had."""
    if "keep_float32" not in results or (results["keep_float32"] == "none").all():
        return []
    keys = [c for c in CONFIG_COLUMNS if c in results and c != "keep_float32"]
    plain = results[results["keep_float32"] == "none"]
    kept = results[(results["keep_float32"] != "none") & (results["status"] != Status.SKIPPED)]
    paired = kept.merge(plain[[*keys, "status", "grad_params_rel_err_over_u"]], on=keys, suffixes=("", "_plain"))
    lines = []
    for (dtype, value), runs in paired.groupby(["dtype", "keep_float32"], sort=False):
        failed_before = runs[runs["status_plain"] == Status.FAILED]
        rescued = failed_before[failed_before["status"] == Status.OK]
        ok = runs[runs["status"] == Status.OK]
        text = (
            f"Keeping `{value}` in float32 ({dtype}): {len(rescued)} of the {len(failed_before)} runs that failed "
            f"without it ran ok; {len(ok)} of {len(runs)} ran ok"
        )
        if ok["grad_params_rel_err_over_u"].notna().any():
            errors = formatting.value_range(ok["grad_params_rel_err_over_u"], formatting.in_u)
            text += f", parameter-gradient error {errors} u"
            both = ok[ok["grad_params_rel_err_over_u_plain"].notna()]
            if not both.empty:
                text += (
                    " (without it "
                    f"{formatting.value_range(both['grad_params_rel_err_over_u_plain'], formatting.in_u)} u on the "
                    "same runs)"
                )
        share = _share_words(runs, str(dtype))
        lines.append(f"- {text}{share}.")
    if len(lines) > KEPT_LINES:
        lines = lines[:KEPT_LINES] + [
            f"- ... and {len(lines) - KEPT_LINES} more (results.parquet, column keep_float32)."
        ]
    return lines


def _share_words(runs: pd.DataFrame, dtype: str) -> str:
    """What share of the field's operations the kept part runs, as its runs measured it (one evaluation, counted)."""
    if "kept_op_share" not in runs or runs["kept_op_share"].isna().all():
        return ""
    percent = lambda v: f"{v:.0%}"  # noqa: E731
    low = runs["low_dtype_op_share"].dropna()
    shares = formatting.value_range(runs["kept_op_share"].dropna(), percent)
    text = f"; the kept part runs {shares} of the field's operations"
    if not low.empty and (low == 0).all():
        return f"{text} and none computes in {dtype}: these runs are float32 arithmetic"
    return f"{text}, {formatting.value_range(low, percent)} compute in {dtype}" if not low.empty else text


def section(inputs: SectionInputs) -> list[str]:
    problem = inputs.sweep.manifest.get("problem")
    watched = "model" if recorded_as_step(problem) else "vector field"
    routed = bool((problem or {}).get("routed"))
    return modules_section(inputs.results, inputs.sweep.modules, watched, routed)


def modules_section(
    results: pd.DataFrame, modules: pd.DataFrame | None, watched: str = "vector field", routed: bool = False
) -> list[str]:
    """`watched`: what the modules are of (the vector field; a training step's whole model); `routed`: the model calls
    torchdiffeq itself, and the sweep routed those calls (the manifest's `problem.routed`)."""
    if modules is None or modules.empty:
        return []
    lines = [
        SECTION,
        "",
        f"Each module of the {watched} was watched over one more run of each configuration (`modules.parquet`): "
        "its local roundoff is its own error (the module re-run in float64 on the very input the run gave it, and "
        "backward its vector-Jacobian product with the very gradient that reached it), not the error it inherits"
        + (
            ", the largest over its calls whose values reach the dtype's normal range"
            if NORMAL_RANGE in modules
            else ""
        )
        + "."
        + (
            " A module whose call solves (the whole model, an ODEBlock) was re-run with the configuration's routed "
            "solve, not with the method its own code names."
            if routed
            else ""
        )
        + " Per dtype, its worst run:",
        "",
    ]
    for dtype, run in worst_runs(results, modules).items():
        rows = rows_of(modules, run)
        label = _run_label(run, several=seed_words.several(results))
        lines += [f"**{dtype}**, {label}. {origin_sentence(origin(rows), run)}", ""]
        shown = ranked(rows, float(run["unit_roundoff"]))
        if not shown.empty:
            lines += [_table(shown, float(run["unit_roundoff"])), ""]
        apart = below_normal_sentence(rows, run)
        if apart:
            lines += [apart, ""]
    said = [line for line in (outside_line(modules), unused_line(modules), incomplete_line(modules)) if line]
    if said:
        lines += [" ".join(said), ""]
    kept = kept_lines(results)
    if kept:
        lines += kept + [""]
    return lines[:-1] if lines[-1] == "" else lines
