"""The answer's cost, timed again: which setups the timing pass after a sweep times (execution/timing_pass.py), and
what its table (timing.parquet) says of them. Pure functions of the results and timing tables.

One timing per configuration, taken while the sweep ran, is moved by whatever else the machine did at that moment:
its ratio to float32 can be off by a factor of several under a varying load. The setups the answer compares are timed
again, interleaved (A B C A B C ...) so that a change of load falls on each alike: the answer's choice, the runner-up,
float32 with the same library, method, n_timesteps, mode and loss placement (whether the sweep ran float32 or not), and
float32 with the user's own library (torchdiffeq) where the choice runs another. All at the choice's n_timesteps (the
runner-up at its own where it did not run there). A ratio is the median of the per-round ratios, with their range.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd

from ..axes.grid import CONFIG_COLUMNS
from ..axes.libraries import LIBRARIES
from ..axes.libraries.base import library_member
from . import verdict
from .answer import Answer
from .choice import choose
from .seeds import several_seeds

# What makes a float32 run the counterpart of a low-precision one: everything else kept, these set.
_PLAIN_FLOAT32 = {"dtype": "float32", "scaling": "none", "arithmetic": "hardware", "rounding": "nearest"}


def setups_to_time(results: pd.DataFrame) -> list[dict]:
    """The configurations (their columns, as in the results table) the timing pass times, most needed first: the
    choice, float32 with its library, float32 with torchdiffeq where the choice runs the native solver, the runner-up,
    float32 with the runner-up's library. None where no dtype is safe for training."""
    chosen = choose(results)
    if chosen is None or chosen.answer.n_timesteps is None:
        return []
    n = chosen.answer.n_timesteps
    first = answer_config(results, chosen.answer, n)
    if first is None:
        return []
    wanted = [first, float32_of(first)]
    switch = routed_float32_of(first)
    if switch is not None:
        wanted.append(switch)
    runner = chosen.runner_up
    if runner is not None and runner.n_timesteps is not None:
        second = answer_config(results, runner, n if n in runner.timesteps else runner.n_timesteps)
        if second is not None:
            wanted += [second, float32_of(second)]
    return list({_key(c): c for c in wanted}.values())


def answer_config(results: pd.DataFrame, a: Answer, n_timesteps: int) -> dict | None:
    """The configuration of `a`'s setup and method at `n_timesteps`, where the sweep ran it without failure; of a sweep
    over several seeds, on the seed its verdict was judged on (what the answer's code builds) where that one ran."""
    runs = verdict.reduction_runs(results, a.judgement)
    runs = runs[(runs["method"] == a.method) & (runs["n_timesteps"] == n_timesteps)]
    judged = runs[runs["seed"] == a.judgement.judged_seed] if a.judgement.judged_seed is not None else runs
    runs = judged if not judged.empty else runs
    if runs.empty:
        return None
    row = results.loc[runs.index[0]]
    return {c: _plain(row[c]) for c in CONFIG_COLUMNS}


def float32_of(config: dict, library: str | None = None) -> dict:
    """The float32 run `config` is set against: the same but for its dtype, scaling and arithmetic (and `library`)."""
    return {**config, **_PLAIN_FLOAT32, **({"library": library} if library else {})}


def routed_float32_of(config: dict) -> dict | None:
    """float32 with torchdiffeq (the library whose calls route to `odeint`, what the native solver replaces), where
    `config` runs the native solver and torchdiffeq is installed."""
    if not library_member(config["library"], "native_solver"):
        return None
    replaced = [name for name in LIBRARIES.names() if library_member(name, "routed_function") == "odeint"]
    return float32_of(config, replaced[0]) if replaced else None


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float


@dataclass(frozen=True)
class TimedCost:
    """An answer's setup as the timing pass timed it, against float32's."""

    method: str
    n_timesteps: int
    library: str
    repeats: int  # rounds every compared setup ran in
    seconds: Spread  # forward + backward
    time_ratio: Spread | None  # per round, against float32 with the same library (None: the setup is float32's)
    memory_ratio: float | None  # peak memory against float32's, where both were measured
    switch_ratio: Spread | None  # per round, against float32 with torchdiffeq, where the setup runs the native solver
    load: tuple[float, float] | None  # the 1-minute load average over the rounds, min – max
    seed: int | None = None  # the initialisation timed, where the sweep ran several (the pass times one)


def timed_cost(results: pd.DataFrame, timing: pd.DataFrame | None, a: Answer) -> TimedCost | None:
    """`a`'s cost from the timing table, at the n_timesteps it was timed at; None where the pass did not time it."""
    if timing is None or timing.empty or not a.train or a.method is None:
        return None
    for n in a.timesteps:
        config = _on_timed_seed(answer_config(results, a, n), timing)
        mine = setup_rounds(timing, config) if config is not None else None
        if config is not None and mine is not None:
            return _cost(results, timing, config, mine)
    return None


def _on_timed_seed(config: dict | None, timing: pd.DataFrame) -> dict | None:
    """`config` on the seed the pass timed: it times every setup on the choice's problem (execution/timing_pass.py),
    so a runner-up judged on another seed was timed on the choice's."""
    seeds = timing["seed"].dropna().unique() if "seed" in timing else []
    return {**config, "seed": _plain(seeds[0])} if config is not None and len(seeds) == 1 else config


def timed_seed(timing: pd.DataFrame | None) -> int | None:
    """The seed whose initialisation the pass timed, where the table records one."""
    seeds = timing["seed"].dropna().unique() if timing is not None and "seed" in timing else []
    return int(seeds[0]) if len(seeds) == 1 else None


def _cost(results: pd.DataFrame, timing: pd.DataFrame, config: dict, mine: pd.DataFrame) -> TimedCost:
    plain = float32_of(config)
    is_float32 = _key(plain) == _key(config)
    float32 = None if is_float32 else setup_rounds(timing, plain)
    switch_config = routed_float32_of(config)
    switch = setup_rounds(timing, switch_config) if switch_config is not None and not is_float32 else None
    load = mine["load_average_1m"].dropna()
    return TimedCost(
        config["method"],
        int(config["n_timesteps"]),
        config["library"],
        len(mine),
        spread(mine["seconds"]),
        per_round_ratio(mine, float32),
        _memory_ratio(results, mine, float32, config, plain),
        per_round_ratio(mine, switch),
        (float(load.min()), float(load.max())) if len(load) else None,
        int(config["seed"]) if several_seeds(results) else None,
    )


def setup_rounds(timing: pd.DataFrame, config: dict) -> pd.DataFrame | None:
    """The setup's rounds, by repeat: forward + backward `seconds`, peak memory, load; None where it was not timed."""
    match = pd.Series(True, index=timing.index)
    for column, value in config.items():
        match &= timing[column] == value
    rows = timing[match]
    if rows.empty:
        return None
    return rows.assign(seconds=rows["time_forward_s"] + rows["time_backward_s"]).set_index("repeat").sort_index()


def per_round_ratio(mine: pd.DataFrame, other: pd.DataFrame | None) -> Spread | None:
    """The median and range of the ratios of `mine`'s seconds to `other`'s in the same rounds."""
    if other is None:
        return None
    ratios = (mine["seconds"] / other["seconds"]).dropna()  # aligned by round
    return spread(ratios) if len(ratios) else None


def _memory_ratio(
    results: pd.DataFrame, mine: pd.DataFrame, float32: pd.DataFrame | None, config: dict, plain: dict
) -> float | None:
    """Peak memory against float32's: as the timed runs measured it (CUDA), else as the sweep did where it ran both."""
    if float32 is None:
        return None
    if mine["peak_memory_bytes"].notna().any() and float32["peak_memory_bytes"].notna().any():
        return float(mine["peak_memory_bytes"].median() / float32["peak_memory_bytes"].median())
    peaks = [_result_peak(results, c) for c in (config, plain)]
    return peaks[0] / peaks[1] if peaks[0] is not None and peaks[1] else None


def _result_peak(results: pd.DataFrame, config: dict) -> float | None:
    if "peak_memory_bytes" not in results:
        return None
    match = pd.Series(True, index=results.index)
    for column, value in config.items():
        match &= results[column] == value
    peaks = results.loc[match, "peak_memory_bytes"].dropna()
    return float(peaks.iloc[0]) if len(peaks) else None


def timed_setups(timing: pd.DataFrame) -> list[dict]:
    """The configurations the timing table holds, in its order."""
    configs = timing[list(CONFIG_COLUMNS)].drop_duplicates()
    return [{c: _plain(v) for c, v in row.items()} for _, row in configs.iterrows()]


def spread(values: pd.Series) -> Spread:
    """Median, min and max of the finite values."""
    finite = [float(v) for v in values if math.isfinite(v)]
    return Spread(statistics.median(finite), min(finite), max(finite))


def _key(config: dict) -> tuple:
    return tuple(config[c] for c in CONFIG_COLUMNS)


def _plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (the pass builds a Configuration from these)."""
    return value.item() if hasattr(value, "item") else value
