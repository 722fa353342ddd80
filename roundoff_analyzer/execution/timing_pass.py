"""The timing pass after a sweep: the setups the answer compares (judging/timed_cost.py picks them), forward + backward
timed again in this process, interleaved: in every round each setup runs once, one after another, each round starting
one setup further on, so that a change of the machine's load falls on every setup alike (as `roundoff train` times its
setups: training/timing.py). The load average is noted as each round begins.

A first round, not counted, runs each setup at the sweep's smallest n_timesteps: it warms the setup up (first-call
costs) and says what a round at the answer's n_timesteps will cost (that many times as many steps). The repeats are
then as many as fit in TIME_SHARE of the sweep's own time, at least MIN_REPEATS; the setups named last (the
runner-up's) are left out where their MIN_REPEATS rounds do not fit. The choice and float32 with its library, which the
answer's ratio needs, are timed MIN_REPEATS times even where that takes longer (the manifest's `timing_pass_s` beside
the sweep's `duration_s` says what it took). A setup that fails in any round (an overflow, an error) is left out: a
timing of a run that did not complete compares with nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..axes.grid import Configuration
from ..axes.keep_float32 import kept_in_float32
from ..axes.modes import ProblemCopies
from ..core.threads import torch_threads
from ..measuring.one_run import RunOutcome
from ..measuring.references import ReferenceCache, decide_draws
from ..measuring.run_inputs import ResolvedRun, SweepShared
from ..measuring.torch_state import restored_torch_state
from ..planning.sweep_plan import SweepPlan

MIN_REPEATS = 5
MAX_REPEATS = 25
TIME_SHARE = 0.10  # of the sweep's own time
# The setups that the answer's ratio needs: the choice and float32 with its library are timed whatever the budget.
ALWAYS_TIMED = 2


@dataclass
class TimingPass:
    rows: list[dict]  # per setup and round: the configuration's columns and timing.parquet's (TIMING_FIELDS)
    seconds: float  # the pass's wall time, its warm-up round included
    repeats: int


def time_setups(
    plan: SweepPlan,
    configs: list[Configuration],
    sweep_seconds: float,
    stop_requested: Callable[[], bool] = lambda: False,
) -> TimingPass:
    """Time `configs` (most needed first; one n_timesteps) interleaved, repeats chosen within TIME_SHARE of
    `sweep_seconds`; no rows where a stop was asked for before the rounds ended."""
    started = time.perf_counter()
    if not configs:
        return TimingPass([], 0.0, 0)
    # On one problem: the first setup's (its checkpoint's, its seed's); a runner-up found on another seed is timed
    # on this one.
    key = configs[0].problem_key
    configs = [replace(c, seed=key[1]) for c in configs]
    copies = ProblemCopies(plan.problem_for(key))
    config = plan.config
    step_control = {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps}
    # No reference is solved here: the cache is what a SweepShared holds, never asked.
    shared = SweepShared(
        copies,
        ReferenceCache(copies, config.scaler),
        plan.device,
        config.scaler,
        plan.shape,
        step_control=step_control,
        fp8_scaling=config.fp8_scaling,
    )
    runs = [ResolvedRun.of(c, step_control) for c in configs]
    warm_n = min(min(plan.grid.timesteps), *(c.n_timesteps for c in configs))
    hints: dict[int, int | None] = {}
    with torch_threads(plan.threads):
        # As the sweep's processes do: the first warm-up run then does not watch its whole backward (draws.py).
        decide_draws(copies, list(plan.grid.timesteps))
        warm = {i: _run(runs[i], shared, None, warm_n) for i in range(len(runs))}
        for i, outcome in warm.items():
            hints[i] = outcome.retries
        # What each setup's run at its own n_timesteps will take: its warm-up's time, scaled by the steps.
        seconds = {
            i: ((outcome.forward_s or 0.0) + (outcome.backward_s or 0.0)) * configs[i].n_timesteps / warm_n
            for i, outcome in warm.items()
            if outcome.failure is None
        }
        budget_s = sweep_seconds * TIME_SHARE - (time.perf_counter() - started)
        timed, repeats = _within_budget(seconds, budget_s)
        rows: list[dict] = []
        failed: set[int] = set()
        for repeat in range(repeats):
            if stop_requested():
                return TimingPass([], time.perf_counter() - started, 0)
            load = _load_average()
            for k in range(len(timed)):
                i = timed[(repeat + k) % len(timed)]
                outcome = _run(runs[i], shared, hints.get(i))
                if outcome.failure is not None:
                    failed.add(i)
                rows.append(_row(configs[i], repeat + 1, outcome, load))
    kept = [row for row, i in zip(rows, _indices(timed, repeats), strict=True) if i not in failed]
    return TimingPass(kept, time.perf_counter() - started, repeats)


def _within_budget(seconds: dict[int, float], budget_s: float) -> tuple[list[int], int]:
    """The setups to time (of those that ran, by index, most needed first; each with the seconds a run is expected to
    take) and the rounds: the first ALWAYS_TIMED whatever the budget, then each further setup whose MIN_REPEATS rounds
    fit in `budget_s`, then as many rounds as fit, MIN_REPEATS to MAX_REPEATS."""
    ran = sorted(seconds)
    chosen = ran[:ALWAYS_TIMED]
    for i in ran[ALWAYS_TIMED:]:
        if MIN_REPEATS * sum(seconds[j] for j in [*chosen, i]) <= budget_s:
            chosen.append(i)
    round_s = sum(seconds[i] for i in chosen)
    fits = int(budget_s // round_s) if round_s > 0 else MAX_REPEATS
    return chosen, max(MIN_REPEATS, min(MAX_REPEATS, fits))


def _run(resolved: ResolvedRun, shared: SweepShared, hint: int | None, n_timesteps: int | None = None) -> RunOutcome:
    """One forward + backward of the setup, as the sweep runs it (its modules kept in float32 where it keeps them), at
    its n_timesteps or `n_timesteps`."""
    with restored_torch_state():
        cover_forward = shared.copies.trajectory is not None
        with kept_in_float32(shared.copies.model, resolved.config.keep_float32, cover_forward=cover_forward):
            prepared = resolved.prepare(shared)
            n = n_timesteps or resolved.config.n_timesteps
            return resolved.run(prepared, shared, n, hint, draw=resolved.draw(0))


def _row(config: Configuration, repeat: int, outcome: RunOutcome, load: float | None) -> dict:
    return {
        **{name: getattr(config, name) for name in config.__dataclass_fields__},
        "repeat": repeat,
        "time_forward_s": outcome.forward_s,
        "time_backward_s": outcome.backward_s,
        "peak_memory_bytes": outcome.peak_memory_bytes,
        "load_average_1m": load,
    }


def _indices(timed: list[int], repeats: int) -> list[int]:
    return [timed[(repeat + k) % len(timed)] for repeat in range(repeats) for k in range(len(timed))]


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not every platform keeps one
        return None
