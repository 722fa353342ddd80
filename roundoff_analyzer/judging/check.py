"""Regression check: compare a sweep's results with a baseline, configuration by configuration.

A configuration regresses when it was `ok` in the baseline and now fails, is skipped or is missing,
or when one of its errors grew beyond the tolerance `factor * baseline + floor_u * u` (u: the
dtype's unit roundoff). It improves when it was not `ok` and now is, or when an error shrank beyond
the same tolerance read the other way (`baseline > factor * new + floor_u * u`). Where the float64 reference its errors
are measured against moved (yardstick_check.py: its distance from the fine reference, or its own norms), its verdict
is "reference moved", with the reference named as the cause: its errors are said, not compared (against a moved
reference they are neither better nor worse), and, like a regression, it fails the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..axes.grid import CONFIG_COLUMNS, Configuration
from ..core.errors import InputError
from ..measuring.columns import ERROR_METRICS, REFERENCE_NORM_COLUMNS
from ..measuring.outcomes import Status
from ..storage.older_tables import with_axis_defaults
from .check_defaults import DEFAULT_FACTOR, DEFAULT_FLOOR_U
from .yardstick_check import (
    DISC_COLUMNS,
    YARDSTICK_COLUMNS,
    fine_reference_changes,
    norm_changes,
    reference_changes,
    yardstick_lines,
)

REQUIRED_COLUMNS = (*CONFIG_COLUMNS, "status", "unit_roundoff", *ERROR_METRICS)
OPTIONAL_COLUMNS = ("failure_class", *YARDSTICK_COLUMNS, *REFERENCE_NORM_COLUMNS)

# One verdict per configuration. "regression" and "reference moved" fail the check.
REGRESSION, REFERENCE_MOVED, IMPROVEMENT, NEW, MISSING, UNCHANGED, SKIPPED = (
    "regression",
    "reference moved",
    "improvement",
    "new",
    "missing",
    "unchanged",
    "skipped",
)
VERDICTS = (REGRESSION, REFERENCE_MOVED, IMPROVEMENT, NEW, MISSING, UNCHANGED, SKIPPED)
FAILING = (REGRESSION, REFERENCE_MOVED)


@dataclass(frozen=True)
class Tolerance:
    factor: float = DEFAULT_FACTOR
    floor_u: float = DEFAULT_FLOOR_U

    def allowed(self, baseline: float, unit_roundoff: float) -> float:
        """The largest error that is not a regression of `baseline`."""
        return self.factor * baseline + self.floor_u * unit_roundoff


@dataclass(frozen=True)
class Tolerances:
    default: Tolerance = Tolerance()
    per_metric: dict[str, Tolerance] = field(default_factory=dict)

    def __getitem__(self, metric: str) -> Tolerance:
        return self.per_metric.get(metric, self.default)

    def describe(self) -> str:
        parts = [f"error <= {self.default.factor:g} x baseline + {self.default.floor_u:g} u"]
        parts += [
            f"{metric}: {t.factor:g} x baseline + {t.floor_u:g} u" for metric, t in sorted(self.per_metric.items())
        ]
        return "; ".join(parts)


def parse_tolerances(factors: list[str], floors_u: list[str]) -> Tolerances:
    """Tolerances from command-line entries, each `VALUE` (every metric) or `METRIC=VALUE` (that metric)."""
    factor_for = _parse_overrides(factors, "factor", minimum=1.0)
    floor_for = _parse_overrides(floors_u, "floor-u", minimum=0.0)
    default = Tolerance(factor_for.pop(None, DEFAULT_FACTOR), floor_for.pop(None, DEFAULT_FLOOR_U))
    per_metric = {
        metric: Tolerance(factor_for.get(metric, default.factor), floor_for.get(metric, default.floor_u))
        for metric in sorted({m for m in (*factor_for, *floor_for) if m is not None})
    }
    return Tolerances(default, per_metric)


def _parse_overrides(entries: list[str], option: str, minimum: float) -> dict[str | None, float]:
    values: dict[str | None, float] = {}
    for entry in entries:
        named, _, text = entry.rpartition("=")
        metric = named.strip() or None
        if metric is not None and metric not in ERROR_METRICS:
            raise InputError(f"--{option} '{entry}': unknown metric '{metric}'; metrics are {', '.join(ERROR_METRICS)}")
        try:
            value = float(text)
        except ValueError:
            raise InputError(
                f"--{option} '{entry}' must be a number or METRIC=NUMBER, such as 2 or sol_rel_err=2"
            ) from None
        if not math.isfinite(value) or value < minimum:
            raise InputError(f"--{option} '{entry}' must be a finite number >= {minimum:g}")
        values[metric] = value
    return values


@dataclass
class Comparison:
    """The outcome of a check.

    `configurations`: one row per configuration on either side, with the configuration columns,
    `label`, `presence` (both, new only, baseline only), `status_new` and `status_baseline` (empty
    where the configuration is absent), `verdict` and `reasons` (what changed, in words; empty when nothing did).
    `metrics`: one row per (configuration, metric) compared, with `baseline`, `new`, `allowed`, `ratio`
    (new / baseline) and `verdict`; where a configuration's reference moved, its `disc_*` and `reference_*_norm` that
    moved instead.
    `yardsticks`: one line per reference that moved (the fine reference, each library's float64 references).
    """

    configurations: pd.DataFrame
    metrics: pd.DataFrame
    tolerances: Tolerances
    yardsticks: list[str] = field(default_factory=list)

    def with_verdict(self, verdict: str) -> pd.DataFrame:
        return self.configurations[self.configurations["verdict"] == verdict]

    @property
    def regressed(self) -> bool:
        """Whether the check fails: a configuration regressed, or its reference moved."""
        return bool(self.configurations["verdict"].isin(FAILING).any())

    def counts(self) -> dict[str, int]:
        found = self.configurations["verdict"].value_counts()
        return {verdict: int(found.get(verdict, 0)) for verdict in VERDICTS}

    def summary(self) -> str:
        counts = self.counts()
        described = ", ".join(_counted(counts[v], v) for v in VERDICTS if counts[v]) or "nothing to compare"
        return f"{_counted(len(self.configurations), 'configuration')}: {described}"


_NOUNS = (
    REGRESSION,
    IMPROVEMENT,
    "configuration",
)  # the verdicts that are nouns take a plural; the others are adjectives


def _counted(count: int, word: str) -> str:
    return f"{count} {word}{'s' if word in _NOUNS and count != 1 else ''}"


def grid_differences(new: pd.DataFrame, baseline: pd.DataFrame) -> list[str]:
    """Where two results tables' grids differ, one phrase per configuration
    column: 'mode: baseline autocast, now pure'."""
    found = []
    for column in CONFIG_COLUMNS:
        before, after = (list(dict.fromkeys(map(str, t[column]))) if column in t else [] for t in (baseline, new))
        if set(before) != set(after):
            found.append(f"{column}: baseline {', '.join(before) or 'none'}, now {', '.join(after) or 'none'}")
    return found


def share_nothing(new: pd.DataFrame, baseline: pd.DataFrame) -> str | None:
    """One line when two non-empty results tables have no configuration in common (None when they share one)."""
    new, baseline = with_axis_defaults(new), with_axis_defaults(baseline)
    if new.empty or baseline.empty or not new.merge(baseline[list(CONFIG_COLUMNS)], on=list(CONFIG_COLUMNS)).empty:
        return None
    differs = "; ".join(grid_differences(new, baseline)) or "no column, yet no row matches"
    return f"the new results and the baseline have no configuration in common ({differs}); nothing can be compared"


def compare(
    new: pd.DataFrame,
    baseline: pd.DataFrame,
    tolerances: Tolerances | None = None,
    names: tuple[str, str] = ("new results", "baseline"),
) -> Comparison:
    """Match `new` and `baseline` results on the configuration columns and judge every configuration.

    `names` say in an InputError which table was not a results table.
    """
    tolerances = tolerances or Tolerances()
    new, baseline = with_axis_defaults(new), with_axis_defaults(baseline)
    for table, name in zip((new, baseline), names):
        _validate(table, name)
    merged = pd.merge(
        _compared_columns(new, "new"),
        _compared_columns(baseline, "baseline"),
        on=list(CONFIG_COLUMNS),
        how="outer",
        suffixes=("_new", "_baseline"),
        indicator="presence",
    ).sort_values(["order_new", "order_baseline"], na_position="last")  # the new results' order, then what they lack
    merged["presence"] = merged["presence"].map(
        {"both": "both", "left_only": "new only", "right_only": "baseline only"}
    )
    rows: list[dict[str, Any]] = []
    metric_rows: list[dict[str, Any]] = []
    cause = "the fine reference" if fine_reference_changes(new, baseline) else "its float64 reference"
    for record in merged.to_dict("records"):
        verdict, reasons, metrics = _judge(record, tolerances, cause)
        key = {column: record[column] for column in CONFIG_COLUMNS}
        rows.append(
            {
                **key,
                "label": Configuration(**key).label(),
                "presence": record["presence"],
                "status_new": _text(record["status_new"]) or "",
                "status_baseline": _text(record["status_baseline"]) or "",
                "verdict": verdict,
                "reasons": "; ".join(reasons),
            }
        )
        metric_rows.extend({**key, **m} for m in metrics)
    configurations = pd.DataFrame(
        rows, columns=[*CONFIG_COLUMNS, "label", "presence", "status_new", "status_baseline", "verdict", "reasons"]
    )
    metric_columns = [*CONFIG_COLUMNS, "metric", "baseline", "new", "allowed", "ratio", "verdict"]
    compared = pd.DataFrame(metric_rows, columns=metric_columns)
    moved = compared[compared["metric"].isin([*DISC_COLUMNS, *REFERENCE_NORM_COLUMNS])].drop_duplicates(
        list(CONFIG_COLUMNS)
    )
    return Comparison(configurations, compared, tolerances, yardstick_lines(new, baseline, moved))


def _validate(table: pd.DataFrame, name: str) -> None:
    missing = [column for column in REQUIRED_COLUMNS if column not in table.columns]
    if missing:
        raise InputError(
            f"{name} is not a results table (no column {', '.join(missing)}); give a sweep folder or its "
            "results.parquet"
        )
    _validate_kinds(table, name)
    duplicated = table.duplicated(list(CONFIG_COLUMNS))
    if duplicated.any():
        first = Configuration(**{c: table.loc[duplicated.idxmax(), c] for c in CONFIG_COLUMNS}).label()
        raise InputError(f"{name} holds {int(duplicated.sum())} duplicate configuration row(s), e.g. {first}")


def _validate_kinds(table: pd.DataFrame, name: str) -> None:
    """Each compared column holds what a sweep writes there (a table edited by hand or by another tool may not)."""
    whole = ["n_timesteps", "seed"]  # the configuration's integer columns
    numeric = [*whole, "unit_roundoff", *ERROR_METRICS]
    for column in numeric:
        values = table[column]
        if (
            not (pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values))
            and values.notna().any()
        ):
            raise InputError(
                f"{name}: column {column} holds {values.dtype} values, not numbers; give a results table written by "
                "roundoff sweep"
            )
    for column in whole:
        if not pd.api.types.is_integer_dtype(table[column]) and len(table):
            raise InputError(f"{name}: column {column} holds {table[column].dtype} values, not whole numbers")
    for column in (c for c in CONFIG_COLUMNS if c not in numeric):
        if not table[column].map(lambda v: isinstance(v, str)).all():
            raise InputError(f"{name}: column {column} holds values that are not text")


def _compared_columns(table: pd.DataFrame, side: str) -> pd.DataFrame:
    columns = table[[*REQUIRED_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in table.columns)]]
    return columns.assign(**{f"order_{side}": range(len(table))})


def _text(value) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _status(record: dict, side: str) -> str:
    """`ok`, `skipped`, or `failed (overflow)`: the status with its failure class where there is one."""
    status, failure_class = _text(record[f"status_{side}"]), _text(record.get(f"failure_class_{side}"))
    return f"{status} ({failure_class})" if status == Status.FAILED and failure_class else str(status)


def _judge(record: dict, tolerances: Tolerances, cause: str) -> tuple[str, list[str], list[dict]]:
    was, now = _text(record["status_baseline"]), _text(record["status_new"])
    if record["presence"] == "new only":
        return NEW, [f"not in the baseline (now {_status(record, 'new')})"], []
    if record["presence"] == "baseline only":
        if was == Status.OK:
            return REGRESSION, ["missing from the new results (was ok)"], []
        return MISSING, [f"missing from the new results (was {_status(record, 'baseline')})"], []
    change = f"was {_status(record, 'baseline')}, now {_status(record, 'new')}"
    if was == Status.OK and now != Status.OK:
        return REGRESSION, [change], []
    if was != Status.OK and now == Status.OK:
        return IMPROVEMENT, [change], []
    if was != Status.OK:
        return (SKIPPED if was == now == Status.SKIPPED else UNCHANGED), [change], []
    norms = norm_changes(record, _number)
    moved = norms + reference_changes(record, _number)
    if moved:
        return _reference_moved(record, tolerances, "its float64 reference" if norms else cause, moved)
    return _judge_errors(record, tolerances)


def _reference_moved(
    record: dict, tolerances: Tolerances, cause: str, moved: list[tuple[str, float, float]]
) -> tuple[str, list[str], list[dict]]:
    """Both sides ok, the reference moved: its own verdict naming it, the errors' changes said but not judged."""
    u = _number(record["unit_roundoff_new"]) or _number(record["unit_roundoff_baseline"]) or 0.0
    shifted = []
    for metric in ERROR_METRICS:
        before, after = _number(record[f"{metric}_baseline"]), _number(record[f"{metric}_new"])
        if before is not None and after is not None:
            tolerance = tolerances[metric]
            if after > tolerance.allowed(before, u) or before > tolerance.allowed(after, u):
                shifted.append(f"{metric} {_change(before, after)}")
    changes = "; ".join(_moved(column, before, after) for column, before, after in moved)
    reason = f"{cause} changed ({changes}): its errors are not compared with the baseline's" + (
        f" (they moved with it: {'; '.join(shifted)})" if shifted else ""
    )
    metrics = [
        {
            "metric": column,
            "baseline": before,
            "new": after,
            "allowed": None,
            "ratio": after / before if before > 0 else None,
            "verdict": REFERENCE_MOVED,
        }
        for column, before, after in moved
    ]
    return REFERENCE_MOVED, [reason], metrics


def _judge_errors(record: dict, tolerances: Tolerances) -> tuple[str, list[str], list[dict]]:
    """Both sides ok: compare every error metric."""
    u = _number(record["unit_roundoff_new"]) or _number(record["unit_roundoff_baseline"]) or 0.0
    reasons: dict[str, list[str]] = {REGRESSION: [], IMPROVEMENT: []}
    metrics = []
    for metric in ERROR_METRICS:
        before, after = _number(record[f"{metric}_baseline"]), _number(record[f"{metric}_new"])
        if before is None:
            continue  # nothing to hold the new value against
        tolerance = tolerances[metric]
        allowed = tolerance.allowed(before, u)
        if after is None:
            verdict, reason = REGRESSION, f"{metric} no longer measured (was {before:.3g})"
        elif after > allowed:
            verdict, reason = REGRESSION, f"{metric} {_change(before, after)}, allowed {allowed:.3g}"
        elif before > tolerance.allowed(after, u):
            verdict, reason = IMPROVEMENT, f"{metric} {_change(before, after)}"
        else:
            verdict, reason = UNCHANGED, None
        if reason:
            reasons[verdict].append(reason)
        ratio = after / before if after is not None and before > 0 else None
        metrics.append(
            {"metric": metric, "baseline": before, "new": after, "allowed": allowed, "ratio": ratio, "verdict": verdict}
        )
    if reasons[REGRESSION]:
        return REGRESSION, reasons[REGRESSION] + reasons[IMPROVEMENT], metrics
    if reasons[IMPROVEMENT]:
        return IMPROVEMENT, reasons[IMPROVEMENT], metrics
    return UNCHANGED, [], metrics


def _moved(column: str, before: float, after: float) -> str:
    """A yardstick's movement: a `disc_*` to four digits (the smallest it counts is 0.1%), a norm with its relative
    change (the smallest it counts is NORM_RTOL)."""
    if column not in REFERENCE_NORM_COLUMNS:
        return f"{column} {_change(before, after, 4)}"
    relative = f" ({(after - before) / before:+.2g} of itself)" if before and math.isfinite(after) else ""
    return f"{column} {before:.7g} -> {after:.7g}{relative}"


def _change(before: float, after: float, digits: int = 3) -> str:
    return f"{before:.3g} -> {after:.3g}" + (f" (x{after / before:.{digits}g})" if before > 0 else "")
