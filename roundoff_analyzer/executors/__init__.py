from .base import EXECUTORS, Execution, ExecutionReport, Executor, NoProgress
from . import local, processes, slurm  # noqa: F401  (registrations)

__all__ = ["EXECUTORS", "Execution", "ExecutionReport", "Executor", "NoProgress"]
