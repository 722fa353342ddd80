"""The verdict: is a dtype safe for this model? Pure functions of the results table, documented in docs/verdict.md.

Roundoff is judged against what the run's result is already off by:
- the gradient noise (`roundoff_to_noise`: parameter-gradient roundoff over the spread of minibatch gradients),
  which decides whether training can feel it;
- the discretisation error (`*_roundoff_to_disc`: roundoff over the float64 run's distance from the fine
  reference, for the solution and the parameter gradient), which decides whether it costs accuracy.

A setup (dtype, library, scaling, mode over every method and n_timesteps it ran) is
- `safe`: nothing failed, and every roundoff is at most WELL_UNDER times both yardsticks;
- `safe for training`: nothing failed and the gradient roundoff is at most WELL_UNDER times the noise, but
  somewhere the roundoff is above WELL_UNDER times the discretisation error (it limits the accuracy there);
- `borderline`: nothing failed, but the gradient roundoff is above WELL_UNDER times the noise (below it);
- `unsafe`: a run failed, or the gradient roundoff is at or above the noise, or a relative error is above
  MOSTLY_ERROR (the quantity is mostly error), whichever yardstick is missing.
Per dtype and library, the unscaled setup's label is the verdict, unless it is not safe for training and a scaled
setup earns a better one: then the verdict is `needs scaling` (when that setup is safe or safe for training), naming
it and how much it cut the parameter-gradient error.
A setup is also told apart by where its loss was formed (`loss_in`): each placement is judged on its own.
A discretisation error counts only where the fine reference resolves it (at least RESOLVED times the fine
reference's own estimated error); elsewhere that yardstick is left out and the verdict says so.
The gradient noise is itself an estimate, known to a relative standard error u (`grad_noise_uncertainty`, the
jackknife's over its batches): a ratio to it within u of a threshold (|ratio − T| ≤ u·T) could fall on either side
of it with a noise drawn from other batches, and `near_threshold` names the threshold so that each line can say so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd

from ..axes.grid import AXIS_DEFAULTS
from ..axes.scalings import scales
from ..measuring.outcomes import Status
from ..measuring.yardsticks import with_yardstick_columns
from .per_table import per_table
from .seeds import SeedSpread, by_seed, several_seeds

WELL_UNDER = 0.1
AT_OR_ABOVE = 1.0
RESOLVED = 3.0
# A relative error above this is larger than the quantity itself: no yardstick is needed to call it unsafe.
MOSTLY_ERROR = 1.0
# The quantities whose relative error is checked against MOSTLY_ERROR, largest first when several are.
ERROR_QUANTITIES = (
    ("grad_params_rel_err", "parameter gradient"),
    ("grad_y0_rel_err", "gradient w.r.t. y0"),
    ("sol_rel_err", "solution"),
)
DEFAULT_LOSS_IN = AXIS_DEFAULTS["loss_in"]  # rows written before the loss_in axis formed their loss outside autocast
# A scaling strategy that cuts the largest parameter-gradient error by this factor is recommended, failures or not.
CUTS = 10.0

SAFE, TRAINING, BORDERLINE, UNSAFE, NEEDS_SCALING = "safe", "safe for training", "borderline", "unsafe", "needs scaling"
RANK = {SAFE: 0, TRAINING: 1, BORDERLINE: 2, UNSAFE: 3}
T = TypeVar("T")
# (roundoff/disc ratio column, its discretisation error column, the fine reference's error column), judged together.
DISC_RATIOS = (
    ("sol_roundoff_to_disc", "disc_sol_rel_err", "fine_ref_final_rel_err", "solution"),
    ("grad_params_roundoff_to_disc", "disc_grad_params_rel_err", "fine_ref_grad_params_rel_err", "parameter gradient"),
)


@dataclass(frozen=True)
class Worst:
    """The largest value of a ratio over a setup's runs, and where it was."""

    value: float
    method: str
    n_timesteps: int
    quantity: str = "parameter gradient"
    seed: int | None = None  # the seed it was met on, where the runs span several seeds


@dataclass(frozen=True)
class SetupJudgement:
    dtype: str
    library: str
    scaling: str
    mode: str
    label: str
    n_ran: int
    failures: tuple[tuple[str, int, str], ...]  # (method, n_timesteps, failure class)
    to_noise: Worst | None
    to_disc: Worst | None
    unresolved: tuple[tuple[str, int], ...]  # (method, n_timesteps) where the discretisation error was not resolved
    worst_grad: float | None  # the largest parameter-gradient roundoff of its runs without failure
    worst_grad_over_u: float | None
    noise_known: bool
    # (method, quantity, the smallest n_timesteps at which the roundoff is at least the resolved discretisation error):
    # from there on more steps buy no accuracy in this dtype.
    roundoff_dominates: tuple[tuple[str, str, int], ...] = ()
    # The largest relative error above MOSTLY_ERROR (its quantity named), which alone makes the setup unsafe.
    mostly_error: Worst | None = None
    loss_in: str = DEFAULT_LOSS_IN  # where its loss was formed
    noise_uncertainty: float | None = None  # the gradient noise's relative standard error
    noise_batch_size: int | None = None  # the points per batch the gradient noise was measured at
    seeds: SeedSpread | None = None  # each seed judged apart, where the setup ran on several (the label: the worst's)

    @property
    def to_noise_near(self) -> float | None:
        """The threshold the largest roundoff-to-noise ratio lies within the noise's uncertainty of, if any."""
        return near_threshold(self.to_noise.value, self.noise_uncertainty) if self.to_noise is not None else None

    @property
    def setup(self) -> tuple[str, str, str, str]:
        return (self.library, self.dtype, self.scaling, self.mode)

    @property
    def judged_seed(self) -> int | None:
        """The seed whose runs earned the label, where the setup ran on several (the answer's code builds that one)."""
        return self.seeds.judged_seed(self.label) if self.seeds is not None else None


def near_threshold(ratio: float, uncertainty: float | None) -> float | None:
    """WELL_UNDER or AT_OR_ABOVE where `ratio` (to the gradient noise) lies within `uncertainty` (relative) of it:
    another draw of the noise's batches could put it on the other side."""
    if uncertainty is None or not math.isfinite(ratio):
        return None
    return next((t for t in (WELL_UNDER, AT_OR_ABOVE) if abs(ratio - t) <= uncertainty * t), None)


def noise_uncertainty(runs: pd.DataFrame) -> float | None:
    """The gradient noise's relative standard error as the rows record it (a table from before that column: what its
    batch count gives, 1/sqrt(2(B − 1)))."""
    if "grad_noise_uncertainty" in runs and runs["grad_noise_uncertainty"].notna().any():
        return float(runs["grad_noise_uncertainty"].max())
    batches = runs["grad_noise_batches"].dropna() if "grad_noise_batches" in runs else pd.Series(dtype=float)
    return 1 / math.sqrt(2 * (float(batches.max()) - 1)) if not batches.empty and batches.max() > 1 else None


def noise_batch_size(runs: pd.DataFrame) -> int | None:
    """The points per batch of the gradient noise the rows record (None: a table from before that column)."""
    sizes = runs["grad_noise_batch_size"].dropna() if "grad_noise_batch_size" in runs else pd.Series(dtype=float)
    return int(sizes.max()) if not sizes.empty else None


@dataclass(frozen=True)
class Verdict:
    """One dtype with one library (and mode): the label, the setup that earned it, and what scaling did."""

    dtype: str
    library: str
    mode: str
    label: str
    decided_by: SetupJudgement
    unscaled: SetupJudgement | None
    reduction: float | None  # unscaled worst parameter-gradient error / decided_by's, where both ran without failure
    setups: tuple[SetupJudgement, ...]
    reductions: dict[str, float | None]  # the same factor for every scaling of this dtype and library
    loss_in: str = DEFAULT_LOSS_IN

    def cut_by(self, setup: SetupJudgement) -> float | None:
        return self.reductions.get(setup.scaling)


def judge_setups(results: pd.DataFrame) -> list[SetupJudgement]:
    ran = _with_format_labels(with_yardstick_columns(with_loss_in(results[results["status"] != Status.SKIPPED])))
    judged = []
    for (dtype, library, scaling, mode, loss_in), runs in ran.groupby(
        ["dtype", "library", "scaling", "mode", "loss_in"], sort=False
    ):
        judged.append(_judge(dtype, library, scaling, mode, runs, loss_in))
    return judged


def _seed_spread(dtype, library, scaling, mode, runs: pd.DataFrame, loss_in: str) -> SeedSpread | None:
    """The setup judged on each seed's runs apart, where it ran on several."""
    each = [(seed, _judge(dtype, library, scaling, mode, seed_runs, loss_in)) for seed, seed_runs in by_seed(runs)]
    if not each:
        return None
    return SeedSpread(
        tuple(seed for seed, _ in each),
        tuple(j.label for _, j in each),
        tuple(j.to_noise.value if j.to_noise is not None else None for _, j in each),
    )


def labelled(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with `dtype` the label a verdict judges them under
    ('float16 emulated', 'float16 keeping head in float32')."""
    return _with_format_labels(runs)


def with_loss_in(results: pd.DataFrame) -> pd.DataFrame:
    """`results` with the loss_in column (a table built without it formed every loss outside autocast, in float32)."""
    if "loss_in" in results and results["loss_in"].notna().all():
        return results
    return results.assign(
        loss_in=results["loss_in"].fillna(DEFAULT_LOSS_IN) if "loss_in" in results else DEFAULT_LOSS_IN
    )


def _with_format_labels(runs: pd.DataFrame) -> pd.DataFrame:
    """A sweep over the arithmetic or rounding axis judges each variant of a dtype on its own: 'float16 emulated'.
    A dtype that ran with one arithmetic (an eXmY format: emulated only) keeps its plain name. Runs keeping modules
    in float32 are another setup of the dtype: 'float16 keeping head in float32'."""
    varied = [axis for axis in ("arithmetic", "rounding") if axis in runs and runs[axis].nunique() > 1]
    kept = runs["keep_float32"].fillna(AXIS_DEFAULTS["keep_float32"]).astype(str) if "keep_float32" in runs else None
    if not varied and (kept is None or (kept == AXIS_DEFAULTS["keep_float32"]).all()):
        return runs  # (no copy: a large sweep's table is relabelled once per setup judged)
    labels = runs["dtype"].astype(str)
    for axis in varied:
        several = runs.groupby("dtype")[axis].transform("nunique") > 1
        labels = labels.where(~several, labels + " " + runs[axis].astype(str))
    if kept is not None:
        labels = labels.where(kept == AXIS_DEFAULTS["keep_float32"], labels + " keeping " + kept + " in float32")
    return runs.assign(dtype=labels)


with_format_labels = _with_format_labels  # the public name, for the modules that judge formats


def kept_as_dtypes(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with the runs keeping modules in float32 under a dtype of their own ('float16 keeping head in float32'),
    as the verdict and the answer judge them, and their keep_float32 read as judged: the sections that group by dtype
    then never weigh a kept setup and the same setup keeping nothing as one."""
    if "keep_float32" not in runs:
        return runs
    kept = runs["keep_float32"].fillna(AXIS_DEFAULTS["keep_float32"]).astype(str)
    if (kept == AXIS_DEFAULTS["keep_float32"]).all():
        return runs
    labels = (
        runs["dtype"]
        .astype(str)
        .where(kept == AXIS_DEFAULTS["keep_float32"], runs["dtype"].astype(str) + " keeping " + kept + " in float32")
    )
    return runs.assign(dtype=labels, keep_float32=AXIS_DEFAULTS["keep_float32"])


def reduction_runs(results: pd.DataFrame, judgement: SetupJudgement) -> pd.DataFrame:
    labelled = _with_format_labels(with_loss_in(results))
    return labelled[
        (labelled["dtype"] == judgement.dtype)
        & (labelled["library"] == judgement.library)
        & (labelled["scaling"] == judgement.scaling)
        & (labelled["mode"] == judgement.mode)
        & (labelled["status"] == Status.OK)
        & (labelled["loss_in"] == judgement.loss_in)
    ]


def _mostly_error(ok: pd.DataFrame) -> Worst | None:
    """The largest relative error above MOSTLY_ERROR over the runs, of
    the first quantity (in ERROR_QUANTITIES' order) that has one."""
    for column, quantity in ERROR_QUANTITIES:
        worst = _worst(ok, column, quantity)
        if worst is not None and worst.value > MOSTLY_ERROR:
            return worst
    return None


def _judge(dtype, library, scaling, mode, runs: pd.DataFrame, loss_in: str = DEFAULT_LOSS_IN) -> SetupJudgement:
    failed = runs[runs["status"] == Status.FAILED]
    ok = runs[runs["status"] == Status.OK]
    # (only the columns read: itertuples over a results table's ~90 columns costs seconds on a large sweep)
    failures = tuple(
        (str(m), int(n), str(c))
        for m, n, c in failed[["method", "n_timesteps", "failure_class"]].itertuples(index=False)
    )
    to_noise = _worst(ok, "roundoff_to_noise", "parameter gradient")
    noise_known = "grad_noise_rel" in ok and ok["grad_noise_rel"].notna().any()
    to_disc, unresolved, dominates = None, [], []
    for ratio, disc, fine, quantity in DISC_RATIOS:
        if ratio not in ok:
            continue
        resolved = ok[disc].notna() & ok[fine].notna() & (ok[disc] >= RESOLVED * ok[fine])
        unresolved += [
            (str(m), int(n))
            for m, n in ok.loc[ok[disc].notna() & ~resolved, ["method", "n_timesteps"]].itertuples(index=False)
        ]
        worst = _worst(ok[resolved], ratio, quantity)
        if worst is not None and (to_disc is None or worst.value > to_disc.value):
            to_disc = worst
        above = ok[resolved & (ok[ratio] >= AT_OR_ABOVE)]
        dominates += [
            (str(m), quantity, int(runs["n_timesteps"].min())) for m, runs in above.groupby("method", sort=False)
        ]
    grads = ok["grad_params_rel_err"].dropna() if "grad_params_rel_err" in ok else pd.Series(dtype=float)
    worst_grad = float(grads.max()) if not grads.empty else None
    over_u = ok.loc[grads.idxmax(), "grad_params_rel_err_over_u"] if worst_grad is not None else None
    mostly_error = _mostly_error(ok)
    label = _label(bool(failures) or mostly_error is not None, to_noise, to_disc, noise_known)
    return SetupJudgement(
        dtype,
        library,
        scaling,
        mode,
        label,
        len(runs),
        failures,
        to_noise,
        to_disc,
        tuple(dict.fromkeys(unresolved)),
        worst_grad,
        None if over_u is None or pd.isna(over_u) else float(over_u),
        bool(noise_known),
        tuple(dominates),
        mostly_error,
        loss_in,
        noise_uncertainty(ok) if noise_known else None,
        noise_batch_size(ok),
        _seed_spread(dtype, library, scaling, mode, runs, loss_in),
    )


def _label(unsafe: bool, to_noise: Worst | None, to_disc: Worst | None, noise_known: bool) -> str:
    """`unsafe`: a run failed or an error is larger than its quantity; the yardsticks decide the rest."""
    if unsafe or (to_noise is not None and to_noise.value >= AT_OR_ABOVE):
        return UNSAFE
    if noise_known and to_noise is not None and to_noise.value > WELL_UNDER:
        return BORDERLINE
    if to_disc is not None and to_disc.value > WELL_UNDER:
        # Without a measured noise, nothing says training is safe: only the accuracy was judged.
        return TRAINING if noise_known else BORDERLINE
    return SAFE


def _worst(runs: pd.DataFrame, column: str, quantity: str) -> Worst | None:
    values = runs[column].dropna() if column in runs else pd.Series(dtype=float)
    values = values[values.map(math.isfinite)]
    if values.empty:
        return None
    at = values.idxmax()
    seed = int(runs.at[at, "seed"]) if several_seeds(runs) else None
    return Worst(float(values.max()), str(runs.at[at, "method"]), int(runs.at[at, "n_timesteps"]), quantity, seed)


def rank(j: SetupJudgement) -> tuple[int, float]:
    """Better setups sort first: by label, then by the smaller largest parameter-gradient error."""
    return RANK[j.label], j.worst_grad if j.worst_grad is not None else math.inf


def to_noise(j: SetupJudgement) -> float:
    """The largest parameter-gradient roundoff against the gradient noise (inf where not measured)."""
    return j.to_noise.value if j.to_noise is not None else math.inf


def ranked_within_noise(
    items: list[T], group: Callable[[T], tuple], judgement: Callable[[T], SetupJudgement], simpler: Callable[[T], tuple]
) -> list[T]:
    """`items` best first: by `group` (lower first); within a group by the smaller roundoff against the gradient noise,
    except that the setups whose ratio lies within the noise's uncertainty of the group's smallest (r ≤ r_min·(1 + u),
    the precision the ratios are quoted to) cannot be told apart by it: of those the simplest (`simpler`, lower
    first: fewer modules kept in float32, no scaling) comes first. Without a measured noise, by the error alone."""
    ordered = sorted(items, key=lambda i: (group(i), to_noise(judgement(i)), rank(judgement(i))[1]))
    found: list[T] = []
    for _, grouped in itertools.groupby(ordered, key=group):
        members = list(grouped)
        best = judgement(members[0])
        uncertainty = best.noise_uncertainty if best.noise_uncertainty is not None else 0.0
        bound = to_noise(best) * (1 + uncertainty)
        tied = [i for i in members if to_noise(judgement(i)) <= bound] if math.isfinite(bound) else members[:1]
        found += sorted(tied, key=simpler) + [i for i in members if i not in tied]
    return found


def scaled(j: SetupJudgement) -> bool:
    return scales(j.scaling)


@per_table
def verdicts(results: pd.DataFrame) -> list[Verdict]:
    """Per dtype × library × mode (× loss placement), in the order the sweep met them."""
    return _verdicts(results)


def _verdicts(results: pd.DataFrame) -> list[Verdict]:
    judged = judge_setups(results)
    found = []
    for key in dict.fromkeys((j.dtype, j.library, j.mode, j.loss_in) for j in judged):
        setups = tuple(j for j in judged if (j.dtype, j.library, j.mode, j.loss_in) == key)
        unscaled = next((j for j in setups if not scales(j.scaling)), None)
        best = min(setups, key=rank)
        # A scaling is needed only where the unscaled setup is not safe for training: training without it is the
        # simpler setup (docs/verdict.md), whatever a scaled one buys in accuracy.
        if unscaled is None or RANK[best.label] >= RANK[unscaled.label] or unscaled.label in (SAFE, TRAINING):
            decided_by = unscaled or best
            label = decided_by.label
        else:
            decided_by = best
            label = NEEDS_SCALING if best.label in (SAFE, TRAINING) else best.label
        reductions = {j.scaling: reduction(results, unscaled, j) for j in setups}
        dtype, library, mode, loss_in = key
        found.append(
            Verdict(
                dtype,
                library,
                mode,
                label,
                decided_by,
                unscaled,
                reductions.get(decided_by.scaling),
                setups,
                reductions,
                loss_in,
            )
        )
    return found


def reduction(results: pd.DataFrame, unscaled: SetupJudgement | None, scaled: SetupJudgement) -> float | None:
    """How many times smaller the scaled setup's largest parameter-gradient error is than the unscaled one's,
    over the (method, n_timesteps) where both ran without failure."""
    if unscaled is None or unscaled is scaled:
        return None
    both = [
        reduction_runs(results, j).set_index(["method", "n_timesteps"])["grad_params_rel_err"].dropna()
        for j in (unscaled, scaled)
    ]
    common = both[0].index.intersection(both[1].index)
    if common.empty or not (both[1][common] > 0).all():
        return None
    return float(both[0][common].max() / both[1][common].max())


def strong_cuts(results: pd.DataFrame) -> list[tuple[SetupJudgement, SetupJudgement, float]]:
    """(unscaled, scaled, factor) where a scaling cut the largest parameter-gradient error by CUTS or more."""
    found = []
    for verdict in verdicts(results):
        for setup in verdict.setups:
            factor = verdict.cut_by(setup)
            if verdict.unscaled is not None and not setup.failures and factor is not None and factor >= CUTS:
                found.append((verdict.unscaled, setup, factor))
    return found
