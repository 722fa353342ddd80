# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import MODES, Mode, PreparedRun, ProblemCopies, cast_run
from . import autocast, autocast_nocache, pure  # noqa: F401  (registrations)

__all__ = ["MODES", "Mode", "PreparedRun", "ProblemCopies", "cast_run"]
