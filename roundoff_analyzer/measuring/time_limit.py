"""The per-configuration time limit (`--timeout`), a context of its own because the runs, the scale hint's run and
the per-module run of a configuration all hold to it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from . import failures


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ConfigurationTimeout inside the run once `seconds` have passed (main thread, POSIX)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise failures.ConfigurationTimeout(f"configuration ran past its limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
