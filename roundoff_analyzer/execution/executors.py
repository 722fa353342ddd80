"""The executor axis, every built-in executor registered: a new one is a module beside these and one name here (and in
axes/names.py, which `--help` and the config's check read without importing them)."""

# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from . import local, processes, slurm  # noqa: F401  (registrations)
from .base import EXECUTORS, Execution, ExecutionReport, Executor, NoProgress

__all__ = ["EXECUTORS", "Execution", "ExecutionReport", "Executor", "NoProgress"]
