"""The answer: per dtype, what to train with, or not to train in it and why. Pure functions of the results table.

Per dtype (as the verdict labels it: `float16`, or `float16 emulated` in a sweep over the arithmetic axis), the
simplest setup safe for training is chosen (library, scaling, mode: fewest changes, simplicity.changes; ties go to
the better label, then the smaller roundoff against the noise), else the setup with the best verdict:
- if its label is `safe` or `safe for training`, the answer is to train with it, with the method whose total
  error (discretisation and roundoff, against the fine reference; the roundoff alone where the fine reference
  was not solved) is smallest over its runs, at the n_timesteps at which that method ran without failure;
- otherwise the answer is not to train in that dtype, and the chosen setup's judgement says why.
Setups are told apart by where their loss was formed (`loss_in`) too: the answer's code forms it where its
rows did, and where the other placement of the same setup earned another label, `other_placement` holds that
setup's judgement, so that the answer can say which to use and why.
What it costs is its time (forward + backward) and peak memory against the float32 run of the same library,
method, n_timesteps and mode without scaling, where the sweep ran one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from ..axes.grid import CONFIG_COLUMNS
from ..axes.libraries.base import library_member
from ..axes.scalings import unscaled
from ..measuring.outcomes import Status
from . import backward_modes, simplicity, verdict
from .per_table import per_table

TRAINABLE = (verdict.SAFE, verdict.TRAINING)
TOTAL, ROUNDOFF = "total_grad_params_rel_err", "grad_params_rel_err"


@dataclass(frozen=True)
class Cost:
    """The chosen runs against float32's: ratios min – max over the (n_timesteps) both ran, absolute times otherwise."""

    seconds: tuple[float, float] | None  # forward + backward, min – max over the chosen runs
    time_ratio: tuple[float, float] | None  # against float32
    memory_ratio: tuple[float, float] | None  # peak memory against float32
    memory_measured: bool
    # The native solver's runs against torchdiffeq's float32 ones (same method, n_timesteps, mode): what a user who
    # runs torchdiffeq in float32 today switches from, where the sweep ran both; time, then peak memory.
    switch_time_ratio: tuple[float, float] | None = None
    switch_memory_ratio: tuple[float, float] | None = None
    # The native solver's backward in the chosen runs and in the float32 runs they are set against (backward_modes.py:
    # empty where not recorded), and the chosen runs' peak memory in bytes, min – max.
    backward_modes: tuple[str, ...] = ()
    float32_backward_modes: tuple[str, ...] = ()
    peak_bytes: tuple[float, float] | None = None


@dataclass(frozen=True)
class Kept:
    """Modules kept in float32 (a keep_float32 value) against the same dtype without them."""

    value: str  # the keep_float32 value: module names or patterns joined with "+"
    without: verdict.SetupJudgement | None  # the best setup of the dtype keeping nothing, where the sweep ran one
    same_without: verdict.SetupJudgement | None  # the same library, scaling and mode keeping nothing, where it ran
    time_ratio: tuple[float, float] | None  # forward + backward against the same runs keeping nothing
    memory_ratio: tuple[float, float] | None  # peak memory against the same runs keeping nothing, where measured
    # Of the field's operations in one evaluation (min – max over the setup's runs; None where not measured): the
    # share run in the kept part, and the share that computed in the low dtype.
    op_share: tuple[float, float] | None = None
    low_share: tuple[float, float] | None = None

    @property
    def computes_low(self) -> bool:
        """Whether the setup computes anything in its low dtype: not, where the kept part is all of the field's work
        (every operation ran in float32), and the setup is float32 with extra casts."""
        return self.low_share is None or self.low_share[1] > 0

    @property
    def turns_safe(self) -> bool:
        """Keeping the modules made a dtype that is not trainable without them trainable."""
        return self.without is not None and self.without.label not in TRAINABLE

    @property
    def turns_setup_safe(self) -> bool:
        """Keeping the modules made the setup chosen trainable, which
        it is not without them (the dtype may be, another way)."""
        return self.same_without is not None and self.same_without.label not in TRAINABLE


@dataclass(frozen=True)
class Answer:
    dtype: str
    train: bool
    judgement: verdict.SetupJudgement  # the setup chosen: its label, numbers and, for "do not", why
    method: str | None
    timesteps: tuple[int, ...]  # the chosen method's n_timesteps without failure, in order
    roundoff_dominates: tuple[
        tuple[str, int], ...
    ]  # the chosen method's (quantity, smallest n where roundoff >= discretisation)
    cost: Cost | None
    arithmetic: str  # "hardware", or "emulated" when the chosen runs computed in emulated arithmetic
    # The same setup with its loss formed elsewhere, where that earned
    # another label (None: not measured, or the same label).
    other_placement: verdict.SetupJudgement | None = None
    kept: Kept | None = None  # where the chosen runs kept modules in float32: what that bought and cost
    # (rtol, atol) of the chosen runs where their method is adaptive: the answer's code solves with them.
    tolerances: tuple[float, float] | None = None

    @property
    def loss_in(self) -> str:
        return self.judgement.loss_in

    @property
    def plain_float32(self) -> bool:
        """float32 runs compute in float32 throughout whatever their mode: autocast to float32 is no autocast (the
        mode does not enable it, and torch.autocast("cpu", dtype=torch.float32) warns and turns itself off), and a
        `pure` cast to float32 is no cast. Their code is plain float32 code."""
        return self.dtype.split()[0] == "float32" and self.arithmetic == "hardware"

    @property
    def n_timesteps(self) -> int | None:
        """The n_timesteps to train with: the first at which more
        steps stop buying accuracy, else the largest that ran."""
        if not self.timesteps:
            return None
        beyond = [n for _, n in self.roundoff_dominates if n in self.timesteps]
        return min(beyond) if beyond else self.timesteps[-1]

    @property
    def library(self) -> str:
        return self.judgement.library

    @property
    def scaling(self) -> str:
        return self.judgement.scaling

    @property
    def mode(self) -> str:
        return self.judgement.mode


@per_table
def answers(results: pd.DataFrame) -> list[Answer]:
    """One answer per dtype that ran, in the order the sweep met them. Where some setup of the dtype is safe for
    training, the simplest such (fewest changes: simplicity.changes), the better label and then the smaller roundoff
    against the noise breaking ties; else the best verdict, by label, then by its roundoff against the noise, where
    that tells two apart (else the unscaled one)."""
    found = verdict.verdicts(results)
    chosen: dict[str, verdict.SetupJudgement] = {}
    for dtype in dict.fromkeys(v.dtype for v in found):
        trainable = [j for v in found if v.dtype == dtype for j in v.setups if j.label in TRAINABLE]
        if trainable:
            chosen[dtype] = min(trainable, key=simplest_first)
            continue
        setups = [v.decided_by for v in found if v.dtype == dtype]
        ranked = verdict.ranked_within_noise(setups, lambda j: (verdict.RANK[j.label],), lambda j: j, _simpler)
        chosen[dtype] = ranked[0]
    every_setup = [j for v in found for j in v.setups]
    given = [_answer(results, judgement, _other_placement(judgement, every_setup)) for judgement in chosen.values()]
    return [_with_kept(results, a, chosen) for a in given]


def _simpler(j: verdict.SetupJudgement) -> tuple:
    return (verdict.scaled(j),)


def simplest_first(j: verdict.SetupJudgement, kept: str | None = None) -> tuple:
    """Of setups safe for training, the order the answer takes them in: fewer changes, then the better label, then the
    smaller roundoff against the gradient noise, then the smaller parameter-gradient error (`kept`: the modules kept
    in float32, where setups keeping different ones are compared)."""
    return (simplicity.changes(j, kept), verdict.RANK[j.label], verdict.to_noise(j), verdict.rank(j)[1])


# The columns that make two runs the same run but for the modules they keep in float32 (one model per table).
_SAME_RUN = tuple(c for c in CONFIG_COLUMNS if c not in ("model", "keep_float32"))


def _with_kept(results: pd.DataFrame, a: Answer, chosen: dict[str, verdict.SetupJudgement]) -> Answer:
    if "keep_float32" not in results:
        return a
    labelled = verdict.labelled(results)
    rows = results[labelled["dtype"] == a.dtype]
    value = str(rows["keep_float32"].iloc[0]) if not rows.empty else "none"
    if value == "none":
        return a
    without_label = verdict.labelled(rows.assign(keep_float32="none"))["dtype"].iloc[0]
    keys = [c for c in _SAME_RUN if c in results]
    mine = rows[(rows["library"] == a.library) & (rows["scaling"] == a.scaling) & (rows["mode"] == a.mode)]
    if "loss_in" in rows:
        mine = mine[mine["loss_in"].fillna(verdict.DEFAULT_LOSS_IN) == a.loss_in]
    plain = results[results["keep_float32"] == "none"]
    paired = mine.merge(plain, on=keys, suffixes=("", "_plain"))
    time_ratio = memory_ratio = None
    if not paired.empty:
        time_ratio = _span(
            (paired["time_forward_s"] + paired["time_backward_s"])
            / (paired["time_forward_s_plain"] + paired["time_backward_s_plain"])
        )
        memory_ratio = _span(paired["peak_memory_bytes"] / paired["peak_memory_bytes_plain"])
    setup = (without_label, a.library, a.scaling, a.mode, a.loss_in)
    same = next(
        (j for j in verdict.judge_setups(results) if (j.dtype, j.library, j.scaling, j.mode, j.loss_in) == setup), None
    )
    shares = [_span(mine[c]) if c in mine else None for c in ("kept_op_share", "low_dtype_op_share")]
    kept = Kept(value, chosen.get(without_label), same, time_ratio, memory_ratio, *shares)
    # A setup that computes nothing in the low dtype is float32 under another name: not one to train "in" that dtype.
    return replace(a, kept=kept, train=a.train and kept.computes_low)


def _other_placement(
    chosen: verdict.SetupJudgement, setups: list[verdict.SetupJudgement]
) -> verdict.SetupJudgement | None:
    """The same setup (dtype, library, scaling, mode) with its loss formed elsewhere, where it earned another label."""
    others = [j for j in setups if j.setup == chosen.setup and j.loss_in != chosen.loss_in and j.label != chosen.label]
    return min(others, key=verdict.rank) if others else None


def _answer(
    results: pd.DataFrame, judgement: verdict.SetupJudgement, other_placement: verdict.SetupJudgement | None = None
) -> Answer:
    runs = verdict.reduction_runs(results, judgement)
    train = judgement.label in TRAINABLE and not runs.empty
    method = _best_method(runs, judgement) if train else None
    at = runs[runs["method"] == method].sort_values("n_timesteps") if method else runs.iloc[0:0]
    arithmetic = "emulated" if "arithmetic" in at and (at["arithmetic"] == "emulated").any() else "hardware"
    return Answer(
        judgement.dtype,
        train,
        judgement,
        method,
        tuple(int(n) for n in at["n_timesteps"].unique()),
        tuple((q, n) for m, q, n in judgement.roundoff_dominates if m == method),
        cost(results, at) if train else None,
        arithmetic,
        other_placement,
        tolerances=_tolerances(at),
    )


def _tolerances(runs: pd.DataFrame) -> tuple[float, float] | None:
    """The (rtol, atol) the runs' adaptive method solved with; None for a fixed-grid method."""
    if "rtol" not in runs or "atol" not in runs or runs["rtol"].isna().all():
        return None
    row = runs.dropna(subset=["rtol"]).iloc[0]
    return float(row["rtol"]), float(row["atol"])


def _best_method(runs: pd.DataFrame, judgement: verdict.SetupJudgement) -> str | None:
    """The method that never failed in this setup with the smallest largest total error (else roundoff); never an
    adaptive method run at an rtol below the dtype's unit roundoff (one that ran anyway ran on luck)."""
    failed = {m for m, _, _ in judgement.failures}
    candidates = runs[~runs["method"].isin(failed) & ~below_unit_roundoff(runs)]
    if candidates.empty:
        return None
    metric = TOTAL if TOTAL in candidates and candidates[TOTAL].notna().any() else ROUNDOFF
    worst = candidates.groupby("method", sort=False)[metric].max()
    return str(worst.idxmin()) if worst.notna().any() else str(candidates["method"].iloc[0])


def below_unit_roundoff(runs: pd.DataFrame) -> pd.Series:
    """The rows of an adaptive method whose rtol is below their dtype's unit roundoff."""
    if "rtol" not in runs or "unit_roundoff" not in runs:
        return pd.Series(False, index=runs.index)
    return (runs["rtol"] < runs["unit_roundoff"]).fillna(False).astype(bool)


# Axes a run and the float32 run it is timed against share where the table has them: a hardware bfloat16 run set
# against emulated float32, or one initialisation or training checkpoint against another, is not its cost.
SAME_IN_BOTH = ("arithmetic", "rounding", "checkpoint", "seed")


def cost(results: pd.DataFrame, runs: pd.DataFrame) -> Cost | None:
    """Time and peak memory of `runs` against float32 (same library, method, n_timesteps, mode; scaling none)."""
    if runs.empty or "time_forward_s" not in runs:
        return None
    seconds = (runs["time_forward_s"] + runs["time_backward_s"]).dropna()
    results, runs = verdict.with_loss_in(results), verdict.with_loss_in(runs)
    float32 = results[(results["dtype"] == "float32") & unscaled(results["scaling"]) & (results["status"] == Status.OK)]
    keys = ["library", "method", "n_timesteps", "mode", "loss_in"]
    keys += [axis for axis in SAME_IN_BOTH if axis in runs and axis in float32]
    paired = runs.merge(float32, on=keys, suffixes=("", "_float32")) if not float32.empty else None
    time_ratio = memory_ratio = None
    if paired is not None and not paired.empty and runs["dtype"].iloc[0] != "float32":
        times = (paired["time_forward_s"] + paired["time_backward_s"]) / (
            paired["time_forward_s_float32"] + paired["time_backward_s_float32"]
        )
        time_ratio = _span(times)
        memory_ratio = _span(paired["peak_memory_bytes"] / paired["peak_memory_bytes_float32"])
    measured = "peak_memory_bytes" in runs and runs["peak_memory_bytes"].notna().any()
    switch_time, switch_memory = _switch(float32, runs, keys)
    compared = backward_modes.modes(paired, f"{backward_modes.COLUMN}_float32") if time_ratio is not None else ()
    return Cost(
        _span(seconds),
        time_ratio,
        memory_ratio,
        bool(measured),
        switch_time,
        switch_memory,
        backward_modes.modes(runs),
        compared,
        _span(runs["peak_memory_bytes"].astype(float)) if measured else None,
    )


def _switch(
    float32: pd.DataFrame, runs: pd.DataFrame, keys: list[str]
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(time, peak memory) of native runs in a low dtype against torchdiffeq's float32 runs at the same keys."""
    if not library_member(runs["library"].iloc[0], "native_solver") or runs["dtype"].iloc[0] == "float32":
        return None, None
    # What the native solver replaces: torchdiffeq's odeint (the library whose calls route to `odeint`).
    replaced = float32["library"].map(lambda name: library_member(name, "routed_function") == "odeint")
    reference = float32[replaced.astype(bool)].drop(columns="library")
    paired = runs.merge(reference, on=[k for k in keys if k != "library"], suffixes=("", "_float32"))
    if paired.empty:
        return None, None
    times = (paired["time_forward_s"] + paired["time_backward_s"]) / (
        paired["time_forward_s_float32"] + paired["time_backward_s_float32"]
    )
    measured = paired["peak_memory_bytes"].notna() & paired["peak_memory_bytes_float32"].notna()
    memory = paired["peak_memory_bytes"][measured] / paired["peak_memory_bytes_float32"][measured]
    return _span(times), _span(memory)


def _span(values: pd.Series) -> tuple[float, float] | None:
    values = values[values.map(lambda v: v is not None and v == v and math.isfinite(v))] if len(values) else values
    return (float(values.min()), float(values.max())) if len(values) else None
