"""roundoff-analyzer: what float16 and bfloat16 do to neural ODE solutions and gradients.

    import roundoff_analyzer as ra
    result = ra.sweep(model="otflow", timesteps=[8, 32])   # a SweepResult: .results, .figures(), .folder
    result = ra.load("results/otflow-20260101-120000")     # a finished sweep folder
    trained = ra.train(model="cnf", iters=500, dtype=["float32", "float16"], scaling="dynamic")   # a TrainResult
    ra.Problem(model=model, step=step, sample_batch=sample_batch)   # your training step, for a factory to return
    ra.keep_float32(func, "potential.layers.0")            # run a module of your model in float32 under autocast
    w = ra.watch(model, step, every=100, out="watch")       # in your loop, w(iteration, batch): warns before it fails
    problem = ra.model("otflow", hidden=32)                # what a sweep of a model measures: model, loss, batches

The public surface is three modules: this one (what a user calls, `Problem`, the training step a model's factory
returns, the results, the errors to catch, the progress protocols and `StoredWeights`, the low-precision weights the
training steps with),
`roundoff_analyzer.solvers` (the native mixed-precision solver, a drop-in for torchdiffeq's `odeint`) and
`roundoff_analyzer.plugins` (what an author of a model, solver library or other axis value implements and registers).
Every other module is internal and may move.

Importing the package is cheap: torch and the rest load on first use of these names.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .core.errors import InputError, RoundoffWarning
from .core.version import __version__

if TYPE_CHECKING:
    from .api import SweepResult, load, model, sweep
    from .axes.keep_float32 import keep_float32
    from .axes.models.problem import NoMoreBatches, Problem
    from .execution.base import Progress
    from .execution.engine import SweepIncomplete, SweepInterrupted
    from .training.api import TrainResult, train
    from .training.loop import TrainingInterrupted, TrainProgress
    from .training.stored_weights import StoredWeights
    from .training.watch import Watch, watch

__all__ = [
    "InputError",
    "NoMoreBatches",
    "Problem",
    "Progress",
    "RoundoffWarning",
    "StoredWeights",
    "SweepIncomplete",
    "SweepInterrupted",
    "SweepResult",
    "TrainProgress",
    "TrainResult",
    "TrainingInterrupted",
    "Watch",
    "__version__",
    "keep_float32",
    "load",
    "model",
    "sweep",
    "train",
    "watch",
]

# Each lazy name and the module that defines it, imported on first use (they import torch).
_LAZY = {
    "sweep": ".api",
    "load": ".api",
    "model": ".api",
    "SweepResult": ".api",
    "SweepInterrupted": ".execution.engine",
    "SweepIncomplete": ".execution.engine",
    "train": ".training.api",
    "TrainResult": ".training.api",
    "TrainingInterrupted": ".training.loop",
    "keep_float32": ".axes.keep_float32",
    "Problem": ".axes.models.problem",
    "NoMoreBatches": ".axes.models.problem",
    "StoredWeights": ".training.stored_weights",
    "Progress": ".execution.base",
    "TrainProgress": ".training.loop",
    "watch": ".training.watch",
    "Watch": ".training.watch",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
