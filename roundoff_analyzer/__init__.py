"""roundoff-analyzer: what float16 and bfloat16 do to neural ODE solutions and gradients.

    import roundoff_analyzer as ra
    result = ra.sweep(model="otflow", timesteps=[8, 32])   # a SweepResult: .results, .figures(), .folder
    result = ra.load("results/otflow-20260101-120000")     # a finished sweep folder
    trained = ra.train(model="cnf", iters=500, dtype=["float32", "float16"], scaling="dynamic")   # a TrainResult
    ra.keep_float32(func, "potential.layers.0")            # run a module of your model in float32 under autocast

Importing the package is cheap: torch and the rest load on first use of these names.
"""
from .core.version import __version__
from .old_paths import install as _install_old_paths

__all__ = ["sweep", "load", "SweepResult", "train", "keep_float32", "__version__"]

_install_old_paths()


def __getattr__(name: str):
    if name in ("sweep", "load", "SweepResult"):
        from . import api

        return getattr(api, name)
    if name == "keep_float32":
        from .axes.keep_float32 import keep_float32

        return keep_float32
    if name == "train":
        from .training.api import train

        return train
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
