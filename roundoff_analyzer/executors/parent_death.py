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
    """Call first thing in the child. `parent_pid` is the parent's id as the parent saw it, to catch a parent
    that died before this call (the child has then been handed to another process already)."""
    if not _kernel_signal_on_parent_death():
        threading.Thread(target=_watch, args=(parent_pid,), name="parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(1)


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
