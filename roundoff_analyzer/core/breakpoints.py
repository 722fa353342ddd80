"""`breakpoint()` left in a user's model or loss does nothing while a sweep or a training runs, as under
PYTHONBREAKPOINT=0: a batch job (a Slurm task, a worker process, a sweep run overnight) has nobody at a
debugger prompt, and pdb waiting on stdin would hold the job until its time limit. Standard library only:
the CLI's commands use it without importing torch."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

VARIABLE = "PYTHONBREAKPOINT"


@contextmanager
def inert_breakpoints() -> Iterator[None]:
    """Inside, `breakpoint()` returns at once, here and in the processes started meanwhile (they inherit the
    variable); the variable is restored afterwards."""
    previous = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = "0"  # sys.breakpointhook reads it at every call
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = previous


def make_breakpoints_inert() -> None:
    """For a process that only ever runs the sweep's work (a worker, a Slurm task)."""
    os.environ[VARIABLE] = "0"
