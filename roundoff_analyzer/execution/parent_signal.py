"""Ask Linux to end this process with a signal when the thread that started it ends (prctl PR_SET_PDEATHSIG).

Standard library only: the fork server imports it before torch (fork_server_guard.py), so that it can end with its
sweep even while it is still importing."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def kernel_signal_on_parent_death() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
