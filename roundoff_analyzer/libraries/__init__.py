from .base import LIBRARIES, SolverLibrary
from . import native, torchdiffeq_lib  # noqa: F401  (registrations)

__all__ = ["LIBRARIES", "SolverLibrary"]
