"""roundoff-analyzer: what float16 and bfloat16 do to neural ODE solutions and gradients.

    import roundoff_analyzer as ra
    result = ra.sweep(model="otflow", timesteps=[8, 32])   # a SweepResult: .results, .figures(), .folder
    result = ra.load("results/otflow-20260101-120000")     # a finished sweep folder
    trained = ra.train(model="cnf", iters=500, dtype=["float32", "float16"], scaling="dynamic")   # a TrainResult

Importing the package is cheap: torch and the rest load on first use of these names.
"""

__version__ = "0.1.0"
__all__ = ["sweep", "load", "SweepResult", "train", "__version__"]


def __getattr__(name: str):
    # `sweep` is the module roundoff_analyzer/sweep.py, callable as the API's sweep (see its _SweepModule).
    if name == "sweep":
        import importlib

        return importlib.import_module(".sweep", __name__)
    if name == "train":
        from .training import train

        return train
    if name in ("load", "SweepResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
