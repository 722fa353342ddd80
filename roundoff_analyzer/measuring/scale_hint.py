"""Where a searching loss scaler starts its search: the scale found by a cheap run of the same setup.

A hint changes how many backward passes the search takes, never the scale it finds (the scaler checks the hint), so
nothing here reaches a table; it exists because a search at a large n_timesteps costs several full backward passes.
The cheap run is made once per sweep, by the first process that needs it, and read from the results folder by the
others, as the yardsticks' pieces are (yardstick_files.py); a process then starts each search from its last run's.
"""

from __future__ import annotations

import hashlib

from ..axes.grid import Configuration
from . import failures
from .run_inputs import ResolvedRun, SweepShared
from .time_limit import time_limit
from .torch_state import restored_torch_state

# A setup's first run with a searching loss scaler takes its starting point from the same setup at this
# n_timesteps: the search there costs a fraction of one pass at a large n, and k rarely differs by more than one.
HINT_TIMESTEPS = 8


def hint_key(config: Configuration) -> tuple[str, ...]:
    """What a hint is shared by: every axis but n_timesteps and the method (each checkpoint has a `SweepShared`)."""
    return (
        config.library,
        config.dtype,
        config.scaling,
        config.mode,
        config.arithmetic,
        config.rounding,
        config.loss_in,
        config.keep_float32,
    )


def needs_hint(resolved: ResolvedRun, shared: SweepShared) -> bool:
    """Whether the setup's loss scaler searches, at an n_timesteps above the hint's, with no hint known yet."""
    return (
        hint_key(resolved.config) not in shared.scale_hints
        and resolved.scaling.searches_scale
        and resolved.config.n_timesteps > HINT_TIMESTEPS
    )


def shared_scale_hint(resolved: ResolvedRun, shared: SweepShared) -> int | None:
    """`scale_hint` of the setup, made by this sweep's first process to need it and read by the others."""
    files = shared.yardsticks.files if shared.yardsticks is not None else None
    if files is None:
        return scale_hint(resolved, shared)
    piece = "scale_hint_" + hashlib.sha256(repr(hint_key(resolved.config)).encode()).hexdigest()[:16]
    return files.obtain(piece, lambda: {"retries": scale_hint(resolved, shared)})["retries"]


def scale_hint(resolved: ResolvedRun, shared: SweepShared) -> int | None:
    """The retries of the same setup at HINT_TIMESTEPS, or None where that run fails: where the loss scaler's search
    of a larger run starts. Its numbers are not kept."""
    try:
        with restored_torch_state(), time_limit(shared.timeout_s):
            prepared = resolved.prepare(shared)
            outcome = resolved.run(prepared, shared, HINT_TIMESTEPS, None)
    except failures.ConfigurationTimeout:
        return None
    return outcome.retries if outcome.failure is None else None
