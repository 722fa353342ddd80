"""How worker processes start: forked from multiprocessing's fork server, which imports torch and this
package once, so that a worker is ready in a fraction of a second instead of the 2.5 s a spawned one
spent importing torch (issue #15). The server itself has no threads, no CUDA context and no model
when it forks (it only imported modules), which is what makes forking it safe where forking a
process that has run torch is not. It lives as long as the process that started it: a second sweep
in the same notebook reuses it. Where there is no fork server (Windows, macOS without it), workers
are spawned.
"""
from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

# What a worker imports before it measures anything; everything torch-heavy is beneath these.
PRELOAD = ["torch", "torchdiffeq", "roundoff_analyzer.sweep", "roundoff_analyzer.executors.processes"]


def worker_context() -> BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # read when the server starts; later calls change nothing
    return context
