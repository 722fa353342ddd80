from .base import MODES, Mode, PreparedRun, ProblemCopies, cast_run
from . import autocast, autocast_nocache, pure  # noqa: F401  (registrations)

__all__ = ["MODES", "Mode", "PreparedRun", "ProblemCopies", "cast_run"]
