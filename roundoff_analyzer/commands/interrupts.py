"""Ctrl-C during a sweep: the first stops after the configuration in progress, a second stops at once. SIGTERM (a
scheduler's time limit, `kill`, a container stopping) stops at once: Slurm sends SIGKILL about 30 s after it, so
nothing may wait for the configuration in progress, which is abandoned (its shard was never written).

Either way the finished configurations stay on disk, and the command says how to resume (exit 130 after Ctrl-C,
143 after SIGTERM: the shell's codes for the two signals). A sweep that lost configurations without being asked to stop
(a
worker died, a Slurm task failed) says why and how to retry them (exit 1).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console

from ..core.environment import EnvironmentFailure
from ..core.text import printable

if TYPE_CHECKING:  # the sweep engine imports torch; the commands import it when they run
    from ..execution.engine import SweepIncomplete, SweepInterrupted

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
EXIT_INCOMPLETE = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM: raised where the main thread is, so that everything that stops at a second Ctrl-C stops here too."""


class StopRequests:
    """`stop_requested()` for `sweep.run` and `training.run`; `exit_code` is what the command ends with after a stop."""

    def __init__(self) -> None:
        self.requested = False
        self.terminated = False

    def __call__(self) -> bool:
        return self.requested

    @property
    def exit_code(self) -> int:
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED


@contextmanager
def stop_after_current(
    console: Console, current: str = "the configuration in progress", stop: StopRequests | None = None
) -> Iterator[StopRequests]:
    """Yields the stop requests (`stop`, or new ones); SIGINT and SIGTERM handling is restored afterwards."""
    stop = stop or StopRequests()

    def on_interrupt(signum, frame) -> None:
        if signum == signal.SIGTERM:
            stop.requested = stop.terminated = True
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: the rest of the way out is short
            console.print(
                f"terminated: abandoning {current}, keeping everything finished", highlight=False, markup=False
            )
            raise Terminated
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested = True
        console.print(f"stopping after {current} (Ctrl-C again to stop now)", highlight=False, markup=False)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield stop
        return
    previous = {signum: signal.signal(signum, on_interrupt) for signum in STOP_SIGNALS}
    try:
        yield stop
    finally:
        # After a stop the command is on its way out (exit 130 or 143): a later signal must not cut its report short.
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if stop.requested else handler)


def report_interrupted(console: Console, stopped: SweepInterrupted, exit_code: int = EXIT_INTERRUPTED) -> NoReturn:
    console.print(
        f"interrupted: {stopped.n_done} of {stopped.n_total} configurations are done and saved in "
        f"{printable(stopped.out_dir)} "
        f"(results.parquet holds them); run the same command again to run the other {stopped.n_total - stopped.n_done}",
        highlight=False,
        markup=False,
    )
    if stopped.note:
        console.print(stopped.note, highlight=False, markup=False)
    raise SystemExit(exit_code)


def report_incomplete(console: Console, incomplete: SweepIncomplete) -> NoReturn:
    """Configurations lost without a stop request (a worker died, a Slurm task failed): each cause, then how to
    retry."""
    for problem in incomplete.problems:
        console.print(f"error: {printable(problem)}", highlight=False, markup=False)
    console.print(
        f"{incomplete.n_done} of {incomplete.n_total} configurations are done and saved in "
        f"{printable(incomplete.out_dir)}; "
        f"run the same command again to retry the other {incomplete.n_total - incomplete.n_done}",
        highlight=False,
        markup=False,
    )
    raise SystemExit(EXIT_INCOMPLETE)


def report_environment_failure(console: Console, failure: EnvironmentFailure) -> NoReturn:
    """The machine stopped the sweep (a full disk, a read-only folder): one line with what is done and how to go on."""
    console.print(f"error: {failure}", highlight=False, markup=False, soft_wrap=True)
    raise SystemExit(EXIT_INCOMPLETE)
