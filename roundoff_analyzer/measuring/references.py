"""The float64 reference solves every configuration is compared with, computed once per (library, method,
n_timesteps) and shared by the configurations of one checkpoint's sweep; for a step that draws random numbers, once per
draw too (draws.py: each repeat draws anew, and its runs are compared with the reference of their draw)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch

from ..axes.libraries import LIBRARIES, SolverLibrary
from ..axes.methods import METHODS, Method
from ..axes.modes import ProblemCopies, cast_run
from ..axes.scalings import SCALINGS, ScalerSettings
from . import failures
from .discretisation import FINE_LIBRARY, FINE_TABLEAU
from .draws import draws_anew, short_run
from .one_run import RunOutcome, run_once
from .run_spec import RunSpec
from .tape_estimate import TapeTooLarge


class ReferenceCache:
    """float64 solves of one problem (one checkpoint's weights), one per (library, method, n_timesteps), computed on
    first use."""

    def __init__(
        self,
        copies: ProblemCopies,
        settings: ScalerSettings,
        solved_elsewhere: Callable[[SolverLibrary, Method, int], RunOutcome | None] | None = None,
    ) -> None:
        self.copies = copies
        self.settings = settings
        # A reference the sweep solved already as a yardstick's piece (yardsticks.py), where there is one.
        self.solved_elsewhere = solved_elsewhere
        self._cache: dict[tuple[str, str, int, int], RunOutcome] = {}
        self.n_solves = 0
        self.n_recomputed = 0  # solves whose tape would not fit, run again with the field recomputed in the backward
        self.seconds = 0.0

    def get(self, library: SolverLibrary, method: Method, n_timesteps: int, draw: int = 0) -> RunOutcome:
        """The reference of (`library`, `method`, `n_timesteps`) on draw `draw` of the step's random numbers (the
        one reference of draw 0, where the step draws none)."""
        draw = draw if draws_anew(self.copies) else 0
        key = (library.name, method.name, n_timesteps, draw)
        if key not in self._cache and draw == 0 and self.solved_elsewhere is not None:
            found = self.solved_elsewhere(library, method, n_timesteps)
            if found is not None:  # counted here too: it is this reference's one solve
                self._cache[key] = found
                self.n_solves += 1
        if key not in self._cache:
            start = time.perf_counter()
            prepared = cast_run(self.copies, torch.float64)
            none = SCALINGS.get("none")
            run = RunSpec(prepared, self.copies, library, method, n_timesteps, torch.float64, draw=draw)
            outcome = run_once(run, none, self.settings)
            if outcome.failure is not None and outcome.failure.failure_type == TapeTooLarge.__name__:
                # Its tape would not fit: the same solve, its field's activations computed again in the backward.
                self.n_recomputed += 1
                outcome = run_once(replace(run, recompute_field=True), none, self.settings)
            if outcome.failure is not None:
                raise failures.ReferenceFailed(outcome.failure)
            self._cache[key] = outcome
            self.n_solves += 1
            self.seconds += time.perf_counter() - start
        return self._cache[key]


# The short run's steps at most: a few, so that its backward, watched operation by operation, costs little.
SHORT_RUN_STEPS = 2


def decide_draws(copies: ProblemCopies, timesteps: list[int]) -> None:
    """Find out whether the step draws random numbers by a short run of it (draws.py's `short_run`) before its first
    full run, where no run has said yet: the classical RK4 of the native solver in float64, in the fewest steps of the
    grid or SHORT_RUN_STEPS, whichever is fewer; its outcome is dropped."""
    with short_run(copies) as drawn:
        if drawn is None:
            return
        library, method = LIBRARIES.get(FINE_LIBRARY), METHODS.get(FINE_TABLEAU)
        steps = min(SHORT_RUN_STEPS, *timesteps)
        run = RunSpec(cast_run(copies, torch.float64), copies, library, method, steps, torch.float64)
        drawn.complete = run_once(run, SCALINGS.get("none"), ScalerSettings()).failure is None
