"""`roundoff train`: train a model in one or more precisions (of compute and of the weights), saving checkpoints a
sweep can load.

Importing the package is cheap (`roundoff train --help` reads the defaults of its config): torch loads on first use
of these names.
"""

__all__ = ["TrainResult", "TrainProgress", "TrainingInterrupted", "plan", "run", "train"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import api, loop

    exported = {
        "TrainResult": api.TrainResult,
        "plan": api.plan,
        "run": api.run,
        "train": api.train,
        "TrainingInterrupted": loop.TrainingInterrupted,
        "TrainProgress": loop.TrainProgress,
    }
    globals().update(exported)
    return exported[name]
