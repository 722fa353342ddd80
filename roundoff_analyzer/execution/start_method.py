"""How worker processes start: forked from multiprocessing's fork server, which imports torch and this
package once, so that a worker is ready in a fraction of a second instead of the 2.5 s a spawned one
spent importing torch. The server itself has no threads, no CUDA context and no model
when it forks (it only imported modules), which is what makes forking it safe where forking a
process that has run torch is not. It lives as long as the process that started it: a second sweep
in the same notebook reuses it. Where there is no fork server (Windows, macOS without it), workers
are spawned.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext, ForkServerContext, SpawnContext

from .server_environment import restore, set_for_server

# What a worker imports before it measures anything; everything torch-heavy is beneath these. pandas too: pyarrow
# imports it to make a shard's table from Python values (0.3 s of a worker's first shard), and the report's figure
# process (report/figure_files.py), forked from this server, reads the tables with it. Not matplotlib, which only
# that process needs. The guard first (standard library only): the server ends with the process that started
# it, even while it imports torch.
PRELOAD = [
    "roundoff_analyzer.execution.fork_server_guard",
    "roundoff_analyzer.execution.package_identity",  # its digest taken when the server imports the package
    "torch",
    "torchdiffeq",
    "roundoff_analyzer.execution.worker",
    "roundoff_analyzer.execution.processes",
    "pandas",
]


def worker_context() -> SpawnContext | ForkServerContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # read when the server starts; later calls change nothing
    return context


_server_started = False  # by this process, which it outlives as long as this process runs


def warm_up(context: BaseContext) -> None:
    """Start the fork server now, if that is how workers start: it imports torch in the background meanwhile.
    Call it with SIGINT ignored (`children_ignore_sigint`), as `start_processes` does: the server's children inherit
    that."""
    global _server_started
    if context.get_start_method() == "forkserver":
        with _parents_path():
            multiprocessing.forkserver.ensure_running()
        _server_started = True


@contextmanager
def _parents_path() -> Iterator[None]:
    """The fork server started on this process's sys.path. multiprocessing runs it as `python -c`, which puts the
    working directory first and does not apply the parent's path (Python 3.11's passes it and ignores it): a copy
    of this package in that folder (an older clone) would be what every worker runs. PYTHONSAFEPATH keeps the working
    directory off; PYTHONPATH lists this process's path, in order (its '' the folder it meant then)."""
    saved = set_for_server([entry or os.getcwd() for entry in sys.path])
    try:
        yield
    finally:
        restore(saved)


def fork_server_started() -> bool:
    """Whether this process has started the workers' fork server, so that a process forked from it is ready at once,
    with torch imported (one started for the first time would first import it)."""
    return _server_started


def warm_up_workers() -> None:
    """Start the workers' fork server now, in the background: a process that will start workers calls it as early as
    it knows it may (the command line: before it imports torch itself, so that both import side by side)."""
    with children_ignore_sigint():
        warm_up(worker_context())


@contextmanager
def children_ignore_sigint() -> Iterator[None]:
    """Processes started inside inherit SIGINT ignored, so a Ctrl-C cannot reach them before they set it up."""
    if threading.current_thread() is threading.main_thread():  # signal handlers can be set there only
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
    else:
        yield


def start_processes(
    context: BaseContext, processes: list, failed: Callable[[int, BaseException], None]
) -> threading.Thread | None:
    """Start `processes` without holding up the caller where that is safe; returns the thread that starts them.
    `failed(index, exception)` is told of a process that could not be started.

    A fork server that is not running yet imports torch before it forks anything, seconds in which the
    sweep's own process measures. The server is started here, in the caller's thread, so that it inherits
    the caller's signal dispositions (SIGINT ignored: see processes.py); the forks are then asked for from a
    thread. Spawned processes inherit their dispositions at the moment they start, so they start here."""

    def start_all() -> None:
        for index, process in enumerate(processes):
            try:
                process.start()
            except Exception as exc:  # noqa: BLE001 - the sweep goes on with the processes that started
                failed(index, exc)

    if context.get_start_method() != "forkserver":
        start_all()
        return None
    warm_up(context)
    starter = threading.Thread(target=start_all, name="roundoff-worker-start", daemon=True)
    starter.start()
    return starter
