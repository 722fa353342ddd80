"""`roundoff train`: train a model with Adam in one or more precisions, saving checkpoints a sweep can load."""
from .api import TrainResult, plan, run, train
from .loop import TrainingInterrupted, TrainProgress

__all__ = ["TrainResult", "TrainProgress", "TrainingInterrupted", "plan", "run", "train"]
