"""What a sweep's results say, as plain data: pure functions from the results table to findings.

Nothing here writes text; the modules in `sections/` word the findings and `tables.py` lays out the numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ..axes import scalings
from ..axes.grid import CONFIG_COLUMNS
from ..judging.seeds import several_seeds
from ..measuring.outcomes import FailureClass, Status

# A configuration without its n_timesteps: one line in a figure, one row in an accuracy table.
SETUP_COLUMNS = ("library", "method", "dtype", "scaling", "mode")
# The columns that fix a time grid: runs on one grid share its discretisation error and its float32 time.
GRID_COLUMNS = ["library", "method", "n_timesteps"]

# A library's gradient error "grows with n_timesteps" when it is at least this many times larger at the
# largest n than at the smallest, and "stays flat" when its largest and smallest values are within this ratio.
GROWS = 2.0
FLAT = 1.5
# Configurations whose worst-case error is within this relative distance of the best count as tied for best.
TIED = 0.01

# Numbers inside a message (step indices, norms), not those inside names such as float16 or mat1.
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
# failures.overflow() appends where it happened; the step has its own column, so the clause does not split a group.
_STEP_CLAUSE = re.compile(r" at (forward|backward) step \d+$")


def by_seed(results: pd.DataFrame) -> list[str]:
    """["seed"] where the table records the initialisation: a setup's runs across n_timesteps are compared within one
    seed's, never across seeds (each has its own references, so its own errors)."""
    return ["seed"] if "seed" in results else []


def seed_of(key: tuple, results: pd.DataFrame, several: bool = False) -> int | None:
    """The seed a group's key ends with, where the rows span several initialisations or `several` says the sweep's
    did (else None, so that words name no seed)."""
    return int(key[-1]) if several or several_seeds(results) else None


def is_synthetic(data_source: str | None) -> bool:
    """Whether the manifest's data source says the batch was made up rather than read from a data set."""
    return data_source is not None and "synthetic" in data_source.lower()


def sweep_timesteps(results: pd.DataFrame) -> list[int]:
    return sorted(int(n) for n in results["n_timesteps"].unique())


def grid_order_key(results: pd.DataFrame, columns=SETUP_COLUMNS):
    """A sort key: dtype first, then the other columns, each value ranked where the sweep first met it."""
    rank = {c: {v: i for i, v in enumerate(results[c].unique())} for c in columns}
    priority = ["dtype", *[c for c in columns if c != "dtype"]]
    return lambda named: tuple(rank[c][named[c]] for c in priority)


def in_grid_order(results: pd.DataFrame, setups: list[tuple]) -> list[tuple]:
    key = grid_order_key(results)
    return sorted(setups, key=lambda setup: key(dict(zip(SETUP_COLUMNS, setup))))


def runs_in_grid_order(results: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    key = grid_order_key(results, (*SETUP_COLUMNS, "n_timesteps"))
    return runs.iloc[sorted(range(len(runs)), key=lambda k: key(runs.iloc[k]))]


def without_step(message: str | None) -> str:
    return _STEP_CLAUSE.sub("", message or "")


def message_pattern(message: str | None) -> str:
    """The message without its step and with its numbers blanked: norms and indices differ between runs of one cause."""
    return _NUMBER.sub("…", without_step(message))


@dataclass(frozen=True, eq=False)
class FailureGroup:
    """Failed configurations with one class, exception type and message (up to the numbers in it)."""

    failure_class: str
    failure_type: str | None
    message: str  # the message (without a step) when all agree, else its pattern with the numbers blanked
    rows: pd.DataFrame

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def messages_differ(self) -> bool:
        """Whether the runs' messages differ in more than the step (which the tables show in its own column)."""
        return self.rows["failure_message"].map(without_step).nunique(dropna=False) > 1


def failure_groups(results: pd.DataFrame) -> list[FailureGroup]:
    """Every failure group, the largest first."""
    failed = results[results["status"] == Status.FAILED].assign(
        _pattern=lambda f: f["failure_message"].map(message_pattern)
    )
    groups = []
    for (failure_class, failure_type, pattern), rows in failed.groupby(
        ["failure_class", "failure_type", "_pattern"], sort=False, dropna=False
    ):
        rows = rows.drop(columns="_pattern")
        messages = rows["failure_message"].map(without_step).unique()
        message = messages[0] if len(messages) == 1 else pattern
        groups.append(
            FailureGroup(_none_if_nan(failure_class) or FailureClass.ERROR, _none_if_nan(failure_type), message, rows)
        )
    return sorted(groups, key=lambda g: -g.count)


@dataclass(frozen=True)
class OverflowProgression:
    """Where one setup overflowed, as n_timesteps grows: (n_timesteps, step) pairs in the given phase."""

    setup: tuple
    phase: str | None
    steps: tuple[tuple[int, int], ...]
    seed: int | None = None  # where the rows span several initialisations


def overflow_progressions(rows: pd.DataFrame, several: bool = False) -> list[OverflowProgression]:
    """Setups that overflowed at a known step for at least two n_timesteps (each seed's apart; `several`: the rows are
    part of a sweep over several initialisations, so each progression names its seed)."""
    known = rows[(rows["failure_class"] == FailureClass.OVERFLOW) & rows["overflow_step"].notna()]
    progressions = []
    seeded = by_seed(rows)
    for key, group in known.groupby([*SETUP_COLUMNS, "overflow_phase", *seeded], sort=False, dropna=False):
        if group["n_timesteps"].nunique() >= 2:
            steps = tuple(sorted((int(n), int(s)) for n, s in zip(group["n_timesteps"], group["overflow_step"])))
            phase = _none_if_nan(key[len(SETUP_COLUMNS)])
            seed = seed_of(key, rows, several) if seeded else None
            progressions.append(OverflowProgression(tuple(key[: len(SETUP_COLUMNS)]), phase, steps, seed))
    return progressions


@dataclass(frozen=True)
class Rescue:
    """A (library, method, dtype, mode) that failed without scaling
    at some n_timesteps, and what each scaling did there."""

    library: str
    method: str
    dtype: str
    mode: str
    failed_without: tuple[tuple[int, str], ...]  # (n_timesteps, failure class) with scaling none
    rescued_by: dict[str, tuple[int, ...]]  # scaling -> n_timesteps where it ran
    failed_with: dict[str, tuple[int, ...]]  # scaling -> n_timesteps where it failed too
    seed: int | None = None  # where the rows span several initialisations: each seed's runs are compared apart


def rescues(results: pd.DataFrame) -> list[Rescue]:
    found = []
    seeded = by_seed(results)
    for key, group in results.groupby(["library", "method", "dtype", "mode", *seeded], sort=False, dropna=False):
        library, method, dtype, mode = key[:4]
        unscaled = group[scalings.unscaled(group["scaling"]) & (group["status"] == Status.FAILED)]
        if unscaled.empty:
            continue
        at = set(unscaled["n_timesteps"])
        scaled = group[~scalings.unscaled(group["scaling"]) & group["n_timesteps"].isin(at)]
        rescued, still = {}, {}
        for scaling, runs in scaled.groupby("scaling", sort=False):
            rescued[scaling] = tuple(sorted(int(n) for n in runs.loc[runs["status"] == Status.OK, "n_timesteps"]))
            still[scaling] = tuple(sorted(int(n) for n in runs.loc[runs["status"] == Status.FAILED, "n_timesteps"]))
        failed_without = tuple(
            sorted((int(n), str(c)) for n, c in zip(unscaled["n_timesteps"], unscaled["failure_class"]))
        )
        found.append(
            Rescue(
                library,
                method,
                dtype,
                mode,
                failed_without,
                {s: n for s, n in rescued.items() if n},
                {s: n for s, n in still.items() if n},
                seed_of(key, results) if seeded else None,
            )
        )
    return found


@dataclass(frozen=True)
class Growth:
    """How one setup's error changes from the smallest to the largest n_timesteps it ran without failure."""

    setup: tuple
    metric: str
    timesteps: tuple[int, ...]
    values: tuple[float, ...]  # one per n_timesteps
    seed: int | None = None  # where the rows span several initialisations: one seed's runs

    @property
    def factor(self) -> float:
        return self.values[-1] / self.values[0]

    @property
    def spread(self) -> float:
        return max(self.values) / min(self.values)


def growths(results: pd.DataFrame, metric: str = "grad_params_rel_err") -> list[Growth]:
    ok = results[(results["status"] == Status.OK) & results[metric].gt(0)]
    found = []
    seeded = by_seed(results)
    for key, group in ok.groupby([*SETUP_COLUMNS, *seeded], sort=False, dropna=False):
        group = group.sort_values("n_timesteps")
        if group["n_timesteps"].nunique() >= 2:
            found.append(
                Growth(
                    tuple(key[: len(SETUP_COLUMNS)]),
                    metric,
                    tuple(int(n) for n in group["n_timesteps"]),
                    tuple(group[metric]),
                    seed_of(key, results) if seeded else None,
                )
            )
    return found


@dataclass(frozen=True)
class Contrast:
    """Two libraries on the same method, dtype, scaling, mode and
    n_timesteps: one's error grows, the other's stays flat."""

    grows: Growth
    flat: Growth


def contrasts(found: list[Growth]) -> list[Contrast]:
    pairs = []
    for grows in found:
        if grows.factor < GROWS:
            continue
        for flat in found:
            same_rest = [a for c, a in zip(SETUP_COLUMNS, grows.setup) if c != "library"] == [
                b for c, b in zip(SETUP_COLUMNS, flat.setup) if c != "library"
            ]
            if (
                same_rest
                and flat.setup != grows.setup
                and flat.seed == grows.seed
                and flat.timesteps == grows.timesteps
                and flat.spread <= FLAT
            ):
                pairs.append(Contrast(grows, flat))
    return pairs


@dataclass(frozen=True)
class Best:
    """The setups of one dtype that ran at every n_timesteps with the smallest worst-case error."""

    dtype: str
    setups: tuple[tuple, ...]
    worst: float  # the best setup's largest error over n_timesteps
    worst_over_u: float | None
    metric: str
    seed: int | None = None  # the initialisation of the worst run, where the rows span several


def most_accurate(results: pd.DataFrame, metric: str = "grad_params_rel_err") -> dict[str, Best | None]:
    """Per dtype: among setups that ran without failure at every
    n_timesteps of the sweep (on every seed), the smallest worst-case error (over the seeds: the worst seed's)."""
    every_n = set(sweep_timesteps(results))
    best: dict[str, Best | None] = {}
    for dtype, runs in results.groupby("dtype", sort=False):
        worst = {}
        for setup, group in runs.groupby(list(SETUP_COLUMNS), sort=False):
            if (
                (group["status"] == Status.OK).all()
                and set(group["n_timesteps"]) == every_n
                and group[metric].notna().all()
            ):
                worst[tuple(setup)] = group.loc[group[metric].idxmax()]
        if not worst:
            best[dtype] = None
            continue
        top = min(row[metric] for row in worst.values())
        tied = tuple(s for s, row in worst.items() if math.isclose(row[metric], top, rel_tol=TIED))
        top_row = min(worst.values(), key=lambda row: row[metric])
        over_u = top_row.get(f"{metric}_over_u")
        seed = int(top_row["seed"]) if several_seeds(results) else None
        best[dtype] = Best(dtype, tied, float(top), None if pd.isna(over_u) else float(over_u), metric, seed)
    return best


@dataclass(frozen=True)
class SetupOutcome:
    """One setup across n_timesteps: where it ran, failed (and with which class) or was skipped (and why)."""

    setup: tuple
    ok: tuple[int, ...]
    failed: tuple[tuple[int, str], ...]
    skipped: tuple[int, ...]
    skip_reasons: tuple[str, ...]
    seed: int | None = None  # where the rows span several initialisations: one seed's runs


def setup_outcomes(results: pd.DataFrame) -> list[SetupOutcome]:
    outcomes = []
    seeded = by_seed(results)
    for key, group in results.groupby([*SETUP_COLUMNS, *seeded], sort=False, dropna=False):
        setup = key[: len(SETUP_COLUMNS)]
        by_status = {s: group[group["status"] == s] for s in (Status.OK, Status.FAILED, Status.SKIPPED)}
        outcomes.append(
            SetupOutcome(
                tuple(setup),
                tuple(sorted(int(n) for n in by_status[Status.OK]["n_timesteps"])),
                tuple(
                    sorted(
                        (int(n), str(c))
                        for n, c in zip(
                            by_status[Status.FAILED]["n_timesteps"], by_status[Status.FAILED]["failure_class"]
                        )
                    )
                ),
                tuple(sorted(int(n) for n in by_status[Status.SKIPPED]["n_timesteps"])),
                tuple(by_status[Status.SKIPPED]["skip_reason"].dropna().unique()),
                seed_of(key, results) if seeded else None,
            )
        )
    order = in_grid_order(results, [o.setup for o in outcomes])
    return sorted(outcomes, key=lambda o: (order.index(o.setup), o.seed or 0))


def worst_parameters(param_errors: pd.DataFrame, results: pd.DataFrame, per_dtype: int) -> pd.DataFrame:
    """Per dtype, the parameters whose gradient error is largest over the runs without failure, each with that run."""
    ok = results.loc[results["status"] == Status.OK, list(CONFIG_COLUMNS)]
    runs = param_errors[param_errors["parameter"] != "y0"].merge(ok, on=list(CONFIG_COLUMNS))  # y0 has its own column
    runs = runs[runs["grad_rel_err"].notna()]  # a parameter without a measured error has no rank
    if runs.empty:
        return runs
    worst = runs.loc[runs.groupby(["dtype", "parameter"], sort=False)["grad_rel_err"].idxmax()]
    ranked = (
        worst.sort_values(["dtype", "grad_rel_err"], ascending=[True, False])
        .groupby("dtype", sort=False)
        .head(per_dtype)
    )
    order = {d: i for i, d in enumerate(results["dtype"].unique())}
    return ranked.sort_values("dtype", key=lambda d: d.map(order), kind="stable")


def without_gradient(param_errors: pd.DataFrame, results: pd.DataFrame) -> list[str]:
    """The parameters (and inputs) with no gradient in either run, the float64 reference's nor the low dtype's, in
    every run without failure that measured them: an empty `grad_rel_err` (measuring/rows.py)."""
    ok = results.loc[results["status"] == Status.OK, list(CONFIG_COLUMNS)]
    runs = param_errors[param_errors["parameter"] != "y0"].merge(ok, on=list(CONFIG_COLUMNS))
    if runs.empty:
        return []
    measured = runs.groupby("parameter", sort=False)["grad_rel_err"].apply(lambda e: e.notna().any())
    return [str(name) for name, any_measured in measured.items() if not any_measured]


def _none_if_nan(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


@dataclass(frozen=True)
class GrowthGroup:
    """Setups alike but for their scaling whose error grows by GROWS or more with n_timesteps: one finding."""

    library: str
    method: str
    dtype: str
    mode: str
    members: tuple[Growth, ...]  # one per scaling (and seed, where the rows span several), in grid order

    @property
    def largest_factor(self) -> float:
        return max(g.factor for g in self.members)

    @property
    def seeds(self) -> tuple[int, ...]:
        """The initialisations its members ran on, where the rows span several (each member's ratio is one seed's)."""
        return tuple(dict.fromkeys(g.seed for g in self.members if g.seed is not None))


def growth_groups(results: pd.DataFrame) -> list[GrowthGroup]:
    """Every growing setup, grouped over scalings (and seeds) that share a grid, the steepest group first."""
    grouped: dict[tuple[str, str, str, str, tuple[int, ...]], list[Growth]] = {}
    for growth in growths(results):
        if growth.factor >= GROWS:
            named = dict(zip(SETUP_COLUMNS, growth.setup))
            key = (named["library"], named["method"], named["dtype"], named["mode"], growth.timesteps)
            grouped.setdefault(key, []).append(growth)
    groups = [
        GrowthGroup(library, method, dtype, mode, tuple(members))
        for (library, method, dtype, mode, _), members in grouped.items()
    ]
    return sorted(groups, key=lambda g: -g.largest_factor)


def largest_error(results: pd.DataFrame, metric: str = "grad_params_rel_err") -> pd.Series | None:
    """The run without failure with the largest error."""
    ok = results[(results["status"] == Status.OK) & results[metric].notna()]
    return None if ok.empty else ok.loc[ok[metric].idxmax()]
