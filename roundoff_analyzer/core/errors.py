"""Exceptions with a meaning for the sweep: bad input (one line, exit 2) and named failures."""

from __future__ import annotations


class InputError(Exception):
    """Something the user asked for is not valid; the message says what is allowed."""


class ScalerExhausted(RuntimeError):
    """A loss or adjoint scaler halved its scale as often as it may and still saw non-finite values."""

    def __init__(self, message: str, final_scale: float, retries: int) -> None:
        super().__init__(message)
        self.final_scale = final_scale
        self.retries = retries


def one_line(exc: BaseException) -> str:
    """`Type: first non-empty line of the message`, for quoting someone else's exception in an InputError."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class StepBudgetExhausted(RuntimeError):
    """An adaptive solver attempted as many steps as `--max-steps` allows without reaching the end of the grid."""

    def __init__(self, message: str, steps: int) -> None:
        super().__init__(message)
        self.steps = steps


class LibraryUnsupported(NotImplementedError):
    """A library cannot run this configuration as asked (the message says why); failure class `unsupported`."""


class RoundoffWarning(UserWarning):
    """A watch of a training (`roundoff_analyzer.watch`) saw the roundoff reach the verdict's threshold against the
    gradient noise, the overflow margin fall under its floor, or the low-precision step fail; raised instead of warned
    where the watch's `raise_on` names the reason."""
