"""What a configuration's runs are made of: what the sweep's configurations share in a process (`SweepShared`) and
the configuration's axes resolved from their names (`ResolvedRun`). One place to prepare and start a run, so that the
timed runs, the scale hint's run, the memory run and the per-module run of a configuration cannot differ in how they
are set up."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..axes.arithmetics import ARITHMETICS, Arithmetic, ArithmeticRequest
from ..axes.dtypes import DTYPES, DtypeSpec
from ..axes.grid import Configuration
from ..axes.libraries import LIBRARIES, SolverLibrary
from ..axes.loss_placements import LOSS_PLACEMENTS, LossPlacement
from ..axes.methods import METHODS, AdaptiveRK, Method
from ..axes.modes import MODES, Mode, PreparedRun, ProblemCopies
from ..axes.roundings import ROUNDINGS
from ..axes.scalings import SCALINGS, ScalerSettings, Scaling
from .contract import ProblemShape
from .module_hooks import ModuleObserver
from .one_run import RunOutcome, run_once
from .references import ReferenceCache
from .run_spec import RunSpec
from .yardsticks import Yardsticks


@dataclass
class SweepShared:
    """What the configurations of one checkpoint's sweep share in one process: the problem, its references, the
    settings, and the scale hints found so far."""

    copies: ProblemCopies
    references: ReferenceCache
    device: torch.device
    settings: ScalerSettings
    shape: ProblemShape  # the step's solves, as the contract check saw them: their span and sizes
    repeats: int = 1
    timeout_s: float | None = None
    # rtol, atol and max_steps of adaptive methods.
    step_control: dict[str, float] = field(default_factory=dict)
    yardsticks: Yardsticks | None = None  # None: no discretisation error or gradient noise beside the roundoff
    fp8_scaling: bool = True
    cpu_memory: bool = False  # on the CPU, one extra untimed run per configuration measures its peak memory
    # The training iteration of the checkpoint whose weights `copies` hold, where known.
    train_iteration: int | None = None
    per_module: bool = False  # one extra untimed run per configuration with every module watched (module_hooks.py)
    # The retries of the last run of each setup here: a searching loss scaler starts there (same result, fewer passes).
    scale_hints: dict[tuple[str, ...], int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedRun:
    """A configuration with each axis's implementation looked up (an adaptive method with the sweep's tolerances)."""

    config: Configuration
    library: SolverLibrary
    method: Method
    dtype: DtypeSpec
    scaling: Scaling
    mode: Mode
    arithmetic: Arithmetic
    loss_in: LossPlacement

    @classmethod
    def of(cls, config: Configuration, step_control: dict[str, float]) -> ResolvedRun:
        method = METHODS.get(config.method)
        if isinstance(method, AdaptiveRK):
            method = method.with_settings(**step_control)
        return cls(
            config,
            LIBRARIES.get(config.library),
            method,
            DTYPES.get(config.dtype),
            SCALINGS.get(config.scaling),
            MODES.get(config.mode),
            ARITHMETICS.get(config.arithmetic),
            LOSS_PLACEMENTS.get(config.loss_in),
        )

    def draw(self, repeat: int) -> int:
        """The draw of the step's random numbers that repeat `repeat` is given: its own, so that repeats show the
        spread over draws; draw 0 for every repeat where the rounding is random, whose repeats measure its spread."""
        return 0 if ROUNDINGS.get(self.config.rounding).random else repeat

    def prepare(self, shared: SweepShared, repeat: int = 0) -> PreparedRun:
        """The problem cast for the configuration's mode, dtype and arithmetic (`repeat`: which stochastic rounding)."""
        request = ArithmeticRequest(self.config.rounding, shared.fp8_scaling, repeat)
        return self.arithmetic.prepare(self.mode, shared.copies, self.dtype, request)

    def run(
        self,
        prepared: PreparedRun,
        shared: SweepShared,
        n_timesteps: int,
        scale_hint: int | None,
        observer: ModuleObserver | None = None,
        draw: int | None = None,
    ) -> RunOutcome:
        """One run of the setup (`draw`: the draw of the step's random numbers it is given, as its reference is)."""
        run = RunSpec(
            prepared,
            shared.copies,
            self.library,
            self.method,
            n_timesteps,
            loss_in=self.loss_in,
            observer=observer,
            draw=draw,
        )
        return run_once(run, self.scaling, shared.settings, scale_hint)
