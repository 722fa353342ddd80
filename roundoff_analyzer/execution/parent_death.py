"""A worker process ends when the process that started it ends, however that one ended (SIGKILL included).

Left running, an orphaned worker would go on writing shards into a folder that a later sweep may own.
On Linux the kernel sends the signal (prctl PR_SET_PDEATHSIG); elsewhere a thread watches the parent. A dead
parent that nobody has reaped yet (a zombie) still has its process id: it counts as dead, by its state in /proc.
The fork server the workers come from ends with the sweep as well (fork_server_guard.py), and with it the workers.
"""

from __future__ import annotations

import os
import threading
import time

from .parent_signal import kernel_signal_on_parent_death

WATCH_S = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Call first thing in the child. `parent_pid` is the sweep's process as it saw itself. A spawned child is its
    child; a child of the fork server (started by that process) is not, and then watches it by its id."""
    global _watched
    _watched = parent_pid
    kernel = kernel_signal_on_parent_death()
    if os.getppid() == parent_pid:
        if not kernel:
            threading.Thread(target=_watch, args=(parent_pid,), name="parent-watch", daemon=True).start()
        return
    if not _alive(parent_pid):  # it died before this call
        os._exit(1)
    threading.Thread(target=_watch_by_id, args=(parent_pid,), name="sweep-watch", daemon=True).start()


_watched: int | None = None  # the sweep's process, once die_with_parent was called in this one


def exit_if_sweep_died() -> None:
    """End this process now if the sweep it works for is gone: called before each shard is written, so that nothing
    is written after the sweep's death even in the half second between two looks of the watching thread."""
    if _watched is not None and not _alive(_watched):
        os._exit(1)


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
        pass
    return not _dead_unreaped(pid)


def _dead_unreaped(pid: int) -> bool:
    """A zombie ('Z') or dying ('X') process, as Linux's /proc says; False where there is no /proc to ask."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # pid (comm) state ...: the name may hold spaces and parentheses, the state follows the last ')'.
            return stat.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _watch_by_id(pid: int) -> None:
    while _alive(pid):
        time.sleep(WATCH_S)
    os._exit(1)
