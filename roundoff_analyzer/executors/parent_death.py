"""A worker process ends when the process that started it ends, however that one ended (SIGKILL included).

Left running, an orphaned worker would go on writing shards into a folder that a later sweep may own.
On Linux the kernel sends the signal (prctl PR_SET_PDEATHSIG); elsewhere a thread watches the parent.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_S = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Call first thing in the child. `parent_pid` is the sweep's process as it saw itself. A spawned child is its
    child; a child of the fork server (started by that process) is not, and then watches it by its id."""
    kernel = _kernel_signal_on_parent_death()
    if os.getppid() == parent_pid:
        if not kernel:
            threading.Thread(target=_watch, args=(parent_pid,), name="parent-watch", daemon=True).start()
        return
    if not _alive(parent_pid):  # it died before this call
        os._exit(1)
    threading.Thread(target=_watch_by_id, args=(parent_pid,), name="sweep-watch", daemon=True).start()


def _kernel_signal_on_parent_death() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_S)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _watch_by_id(pid: int) -> None:
    while _alive(pid):
        time.sleep(WATCH_S)
    os._exit(1)
